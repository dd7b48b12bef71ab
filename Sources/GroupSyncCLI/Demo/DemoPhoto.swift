import Foundation

/// The photo the gallery demo adds to its journal: a valid PNG drawn here (an evening sky over a
/// tower), left uncompressed (stored deflate blocks) so that it spans several journal chunks.
enum DemoPhoto {
    static let name = "paris-evening.png"
    static let mediaType = "image/png"

    /// A `width` × `height` RGB PNG.
    static func png(width: Int = 320, height: Int = 240) -> Data {
        var pixels = [UInt8]()
        pixels.reserveCapacity((width * 3 + 1) * height)
        for y in 0..<height {
            pixels.append(0)  // filter: none
            for x in 0..<width {
                let sky = Double(y) / Double(height)
                // The tower: a narrowing dark band in the middle, from a third of the height down.
                let halfWidth = Double(width) * 0.02 + Double(width) * 0.12 * max(0, sky - 0.33)
                let inTower = sky > 0.15 && abs(Double(x) - Double(width) / 2) < halfWidth
                if inTower {
                    pixels += [40, 35, 50]
                } else {
                    pixels += [UInt8(250 - 120 * sky), UInt8(150 - 100 * sky), UInt8(90 + 110 * sky)]
                }
            }
        }
        var header = Data()
        header.appendBigEndian(UInt32(width))
        header.appendBigEndian(UInt32(height))
        header.append(contentsOf: [8, 2, 0, 0, 0])  // 8 bits per sample, RGB, deflate, no filter, no interlace
        var png = Data([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A])
        png.appendChunk("IHDR", header)
        png.appendChunk("IDAT", zlibStored(pixels))
        png.appendChunk("IEND", Data())
        return png
    }

    /// `bytes` as a zlib stream of stored (uncompressed) deflate blocks.
    private static func zlibStored(_ bytes: [UInt8]) -> Data {
        var stream = Data([0x78, 0x01])
        var offset = 0
        repeat {
            let length = min(65_535, bytes.count - offset)
            let final: UInt8 = offset + length == bytes.count ? 1 : 0
            stream.append(final)
            stream.append(contentsOf: [UInt8(length & 0xFF), UInt8(length >> 8), UInt8(~length & 0xFF), UInt8((~length >> 8) & 0xFF)])
            stream.append(contentsOf: bytes[offset..<(offset + length)])
            offset += length
        } while offset < bytes.count
        var (a, b): (UInt32, UInt32) = (1, 0)
        for byte in bytes {
            a = (a + UInt32(byte)) % 65_521
            b = (b + a) % 65_521
        }
        stream.appendBigEndian(b << 16 | a)
        return stream
    }

    fileprivate static let crcTable: [UInt32] = (0..<256).map { index in
        var crc = UInt32(index)
        for _ in 0..<8 { crc = crc & 1 == 1 ? 0xEDB8_8320 ^ (crc >> 1) : crc >> 1 }
        return crc
    }

    fileprivate static func crc32(_ bytes: Data) -> UInt32 {
        var crc: UInt32 = 0xFFFF_FFFF
        for byte in bytes { crc = crcTable[Int((crc ^ UInt32(byte)) & 0xFF)] ^ (crc >> 8) }
        return ~crc
    }
}

extension Data {
    fileprivate mutating func appendBigEndian(_ value: UInt32) {
        append(contentsOf: [UInt8(value >> 24), UInt8((value >> 16) & 0xFF), UInt8((value >> 8) & 0xFF), UInt8(value & 0xFF)])
    }

    /// A PNG chunk: length, type, data, CRC of type and data.
    fileprivate mutating func appendChunk(_ type: String, _ data: Data) {
        appendBigEndian(UInt32(data.count))
        let typed = Data(type.utf8) + data
        append(typed)
        appendBigEndian(DemoPhoto.crc32(typed))
    }
}
