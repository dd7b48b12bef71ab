import Foundation

/// Envelopes without encoding or parsing the body twice: a sender encodes the body alone and writes the
/// header around it; a receiver parses the envelope once, keeps where the body is, and the app's task
/// decodes the body from those bytes as its own type.
extension Wire {
    /// The header of an envelope, on `…/s/<session>/all/<sender>` and `…/to/<recipient>/<sender>`: an
    /// application message, or a control message whose type starts with `$`. Its `body` is read apart
    /// (``Wire/decodeEnvelope(_:)``); ``EnvelopeBytes`` writes the whole envelope.
    package struct EnvelopeHeader: Sendable, Hashable {
        package var v = Wire.version
        /// The message type: the Swift type's name for app messages; `$catchup` and `$end` for control.
        package var type: String
        /// The sender's connection epoch.
        package var epoch: Int64
        /// A reliable app message's place in its stream (the sender's broadcasts, or its direct messages
        /// to one recipient: 1, 2, 3… per session and sender epoch); an unreliable one's number among the
        /// sender's unreliable messages; nil for a control message, which is in no stream.
        package var seq: Int64?
        package var reliable: Bool
        /// `"all"` on a broadcast re-sent to one receiver on its direct topic; nil otherwise (the topic says).
        package var stream: String?
        /// In a private session, the ID of the group key that sealed the body (a base64 string then).
        package var sealed: String? = nil

        /// The header's fields and `body`, as ``EnvelopeBytes`` writes them.
        enum CodingKeys: String, CodingKey { case v, type, epoch, seq, reliable, stream, sealed, body }
    }

    /// An envelope written in two steps: the body first (encoded in the sender's task), then the
    /// header's fields, which follow it in sorted key order (numbered under the sender's lock). The
    /// bytes are those of `JSONEncoder` (sorted keys, slashes unescaped) for the same envelope.
    package struct EnvelopeBytes: Sendable {
        private var bytes: [UInt8]

        /// Encodes `body` with ``Wire/encode(_:)``.
        init(body: some Encodable) throws(GroupSyncError) { self.init(encodedBody: try Wire.encode(body)) }

        /// Around a body already encoded with ``Wire/encode(_:)``.
        package init(encodedBody: Data) {
            bytes = []
            bytes.reserveCapacity(encodedBody.count + 96)
            bytes.append(contentsOf: #"{"body":"#.utf8)
            bytes.append(contentsOf: encodedBody)
        }

        /// Where the encoded body starts in `bytes`, after `{"body":`.
        private static let bodyStart = 8

        /// How an envelope's body is sealed in a private session: by `sealer`, from `sender` to
        /// `recipient` (nil: a broadcast).
        package struct Sealing {
            var sealer: SessionSealer
            var session: String
            var sender: String
            var recipient: String?

            package init(sealer: SessionSealer, session: String, sender: String, recipient: String?) {
                (self.sealer, self.session, self.sender, self.recipient) = (sealer, session, sender, recipient)
            }
        }

        /// The whole envelope; without `seq` for a control message (in no stream). With `sealing`, the body
        /// is sealed for its place: session, sender, recipient, epoch, seq, type and reliability.
        package func finished(type: String, epoch: Int64, seq: Int64?, reliable: Bool, sealing: Sealing? = nil) -> [UInt8] {
            var out: [UInt8]
            if let sealing {
                let context = SealedContext.message(
                    session: sealing.session, sender: sealing.sender, recipient: sealing.recipient, epoch: epoch, seq: seq, type: type,
                    reliable: reliable)
                let body = bytes.count - Self.bodyStart
                out = []
                out.reserveCapacity((AEAD.nonceSize + body + AEAD.tagSize + 2) / 3 * 4 + 160)
                JSONWriter.append(raw: #"{"body":""#, to: &out)
                bytes.withUnsafeBytes {
                    sealing.sealer.appendSealed(UnsafeRawBufferPointer(rebasing: $0[Self.bodyStart...]), context, to: &out)
                }
                out.append(UInt8(ascii: "\""))
            } else {
                out = bytes
            }
            JSONWriter.append(raw: #","epoch":"#, to: &out)
            JSONWriter.append(epoch, to: &out)
            JSONWriter.append(raw: reliable ? #","reliable":true"# : #","reliable":false"#, to: &out)
            if let sealing {
                JSONWriter.append(raw: #","sealed":"#, to: &out)
                JSONWriter.append(string: sealing.sealer.sealingKeyID, to: &out)
            }
            if let seq {
                JSONWriter.append(raw: #","seq":"#, to: &out)
                JSONWriter.append(seq, to: &out)
            }
            JSONWriter.append(raw: #","type":"#, to: &out)
            JSONWriter.append(string: type, to: &out)
            JSONWriter.append(raw: #","v":"#, to: &out)
            JSONWriter.append(Int64(version), to: &out)
            out.append(UInt8(ascii: "}"))
            return out
        }
    }

    /// A broadcast envelope written by ``EnvelopeBytes`` as re-sent to one receiver on its direct topic:
    /// the same bytes with `"stream":"all"`, which sorts between `seq` and `type`. The header follows the
    /// body, so the last `,"type":` is the header's.
    static func resentBroadcast(_ payload: Data) -> Data {
        let marker = Data(#","type":"#.utf8)
        guard let range = payload.lastRange(of: marker) else { return payload }
        var out = payload[..<range.lowerBound]
        out.append(contentsOf: #","stream":"all""#.utf8)
        out.append(payload[range.lowerBound...])
        return Data(out)
    }

    /// An envelope's header, and where its body's JSON value is in the payload.
    package struct ScannedEnvelope: Sendable, Equatable {
        package var header: EnvelopeHeader
        package var body: Range<Int>
    }

    /// Reads an envelope (the whole payload, body included, by the decoding rules), or says why it is
    /// rejected.
    static func readEnvelope(_ payload: Data) throws(Rejection) -> ScannedEnvelope {
        let (fields, body, _) = try JSONParser.parseObject(payload, locating: "body", skipping: true)
        let header = try EnvelopeHeader(fields: fields)
        guard let body else { throw .wrongShape }  // (never: the header requires a body)
        // A sealed body is the sealed text: a JSON string.
        if header.sealed != nil, payload[body].first != UInt8(ascii: "\"") { throw .wrongShape }
        return ScannedEnvelope(header: header, body: body)
    }

    /// ``readEnvelope(_:)``; nil when it is rejected.
    package static func decodeEnvelope(_ payload: Data) -> ScannedEnvelope? { try? readEnvelope(payload) }

    /// An app value (a message body) from its bytes, with `JSONDecoder`.
    static func decodeBody<T: Decodable>(_ type: T.Type, from data: Data) -> T? { try? decoder.decode(type, from: data) }
}

extension Wire.EnvelopeHeader: Wire.Record {
    /// The header of an envelope; its `body` must be there (any JSON value).
    package init(fields: Wire.Fields) throws(Wire.Rejection) {
        try fields.checkVersion()
        _ = try fields.value(CodingKeys.body)
        let stream = try fields.optionalString(CodingKeys.stream)
        guard stream == nil || stream == "all" else { throw .wrongShape }
        self.init(
            type: try fields.string(CodingKeys.type), epoch: try fields.int(CodingKeys.epoch, in: Wire.Bounds.time),
            seq: try fields.optionalInt(CodingKeys.seq, in: Wire.Bounds.seq), reliable: try fields.bool(CodingKeys.reliable),
            stream: stream,
            sealed: try fields.optionalString(CodingKeys.sealed)
        )
    }
}
