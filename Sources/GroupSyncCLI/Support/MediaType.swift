import Foundation

/// The media type of a file added to a session's journal without one: guessed from the extension for
/// common image types (and a few others a group shares), `application/octet-stream` otherwise.
enum MediaType {
    static let fallback = "application/octet-stream"

    static let byExtension: [String: String] = [
        "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif", "webp": "image/webp",
        "heic": "image/heic", "heif": "image/heif", "avif": "image/avif", "bmp": "image/bmp", "tif": "image/tiff",
        "tiff": "image/tiff", "svg": "image/svg+xml", "ppm": "image/x-portable-pixmap", "pdf": "application/pdf",
        "txt": "text/plain", "json": "application/json", "mp4": "video/mp4", "mov": "video/quicktime", "mp3": "audio/mpeg",
    ]

    /// The media type for `path`, by its extension (case-insensitive).
    static func guess(for path: String) -> String {
        byExtension[URL(fileURLWithPath: path).pathExtension.lowercased()] ?? fallback
    }
}
