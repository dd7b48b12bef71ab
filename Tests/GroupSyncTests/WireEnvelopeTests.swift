import Foundation
import Testing

@testable import GroupSync

/// The codec without a broker: envelopes written around their body are `JSONEncoder`'s bytes, the parser
/// enforces the decoding rules, and every record reads back what was written.
@Suite struct WireEnvelopeTests {
    struct Note: Codable, Sendable, Equatable {
        var text: String
        var tags: [String: Int]
        var nested: [[Double]]
        var flag: Bool?
    }

    /// The whole envelope as one `Encodable`: the reference for ``Wire/EnvelopeBytes``.
    struct Envelope<Body: Encodable>: Encodable {
        var v = Wire.version
        var type: String
        var epoch: Int64
        var seq: Int64
        var reliable: Bool
        var body: Body
    }

    static let notes = [
        Note(text: "plain", tags: [:], nested: [], flag: nil),
        Note(
            text: "quote \" backslash \\ slash / tab \t newline \n bell \u{7} é 🎉", tags: ["b": 2, "a": 1], nested: [[1.5, -2e10], []],
            flag: true),
    ]

    @Test(arguments: ["Ping", "Array<Int>", "we\"ird\\type\u{1}\u{1f}\u{8}\u{c}\r/ü", ""])
    func anEnvelopeIsByteForByteWhatJSONEncoderWrites(type: String) throws {
        for note in WireEnvelopeTests.notes {
            // The extremes of each field's range (PROTOCOL.md, "Ranges").
            for (epoch, seq, reliable) in [(Int64(42), Int64(1), true), (Wire.Bounds.time.upperBound, Wire.Bounds.seq.upperBound, false)] {
                let bytes = Data(try Wire.EnvelopeBytes(body: note).finished(type: type, epoch: epoch, seq: seq, reliable: reliable))
                let reference = try Wire.encode(Envelope(type: type, epoch: epoch, seq: seq, reliable: reliable, body: note))
                #expect(bytes == reference, "\(String(decoding: bytes, as: UTF8.self))")
                let envelope = try Wire.readEnvelope(bytes)
                #expect(envelope.header == Wire.EnvelopeHeader(type: type, epoch: epoch, seq: seq, reliable: reliable))
                #expect(Wire.decodeBody(Note.self, from: bytes[envelope.body]) == note)
            }
        }
        // Raw bytes travel as a base64 string.
        let data = Data([0, 1, 2, 250])
        let bytes = Data(try Wire.EnvelopeBytes(body: data).finished(type: "Data", epoch: 1, seq: 1, reliable: true))
        #expect(bytes == (try Wire.encode(Envelope(type: "Data", epoch: 1, seq: 1, reliable: true, body: data))))
        #expect(Wire.decodeBody(Data.self, from: bytes[try Wire.readEnvelope(bytes).body]) == data)
    }

    /// Integers are written as `JSONEncoder` writes them, at both ends of their range.
    @Test func integersAreWrittenAsFoundationWritesThem() throws {
        for number in [0, 1, -1, 9, -10, 1_796_214_382_038, .max, .min] as [Int64] {
            var out: [UInt8] = []
            JSONWriter.append(.int(number), to: &out)
            #expect(Data(out) == (try Wire.encode(number)), "\(number)")
            let envelope = Data(
                Wire.EnvelopeBytes(encodedBody: Data("1".utf8)).finished(type: "T", epoch: number, seq: number, reliable: false))
            #expect(envelope == (try Wire.encode(Envelope(type: "T", epoch: number, seq: number, reliable: false, body: 1))), "\(number)")
        }
    }

    @Test func anyFormattingAndUnknownKeysAreRead() throws {
        let text = """
            {
              "v" : 2, "seq": 7, "extra": {"a": [1, 2.5e3, "x\\"y", {"b": null}], "c": []},
              "type" : "Note", "reliable" : false,
              "body" : { "text" : "hi", "tags": {}, "nested": [[1]] },
              "epoch": 1796214382038
            }
            """
        let payload = Data(text.utf8)
        let envelope = try Wire.readEnvelope(payload)
        #expect(envelope.header == Wire.EnvelopeHeader(type: "Note", epoch: 1_796_214_382_038, seq: 7, reliable: false))
        #expect(Wire.decodeBody(Note.self, from: payload[envelope.body]) == Note(text: "hi", tags: [:], nested: [[1]], flag: nil))
        // In a slice of a larger buffer, the body's range is in the slice's indices.
        let slice = (Data("xx".utf8) + payload)[2...]
        #expect(Wire.decodeBody(Note.self, from: slice[try Wire.readEnvelope(slice).body])?.text == "hi")
    }

    @Test func theParserEnforcesTheRules() {
        let cases: [(String, Wire.Rejection?)] = [
            (#"{"a":1}"#, nil), (" [1, -0, 1.5, true, null, \"\\u00e9\\uD83D\\uDE00\"] ", nil), ("\"x\"", nil),
            ("\u{FEFF}{}", .bom), ("", .malformed), ("{", .malformed), ("{} x", .malformed), ("01", .malformed),
            ("1.", .malformed), ("-", .malformed), (".5", .malformed), ("+1", .malformed), (#"{"a":1,}"#, .malformed),
            ("[1,]", .malformed), (#""\q""#, .malformed), (#""\u12""#, .malformed), ("\"a\u{1}\"", .malformed),
            ("tru", .malformed), ("NaN", .malformed), (#""\uD800""#, .invalidUTF8), (#""\uDC00""#, .invalidUTF8),
            (#""\uD800\u0041""#, .invalidUTF8), ("1e400", .badNumber), (#"{"a":1,"a":1}"#, .duplicateKey),
            (#"[{"x":{"a":1,"\u0061":2}}]"#, .duplicateKey),
            (String(repeating: "[", count: 512) + String(repeating: "]", count: 512), nil),
            (String(repeating: "[", count: 513) + String(repeating: "]", count: 513), .tooDeep),
        ]
        for (text, rejection) in cases {
            #expect(Result { () throws(Wire.Rejection) in try JSONParser.parse(Data(text.utf8)) }.failure == rejection, "\(text)")
            // Checked without being built — an opened body, an envelope's body located and skipped —, by the
            // same rules (a skipped plain string is not built at all).
            #expect(Result { () throws(Wire.Rejection) in try JSONParser.check(Data(text.utf8)) }.failure == rejection, "\(text)")
            guard rejection != .bom, !text.isEmpty, text.count < 100 else { continue }  // (nesting: one level deeper)
            let envelope = Data(#"{"body":\#(text),"x":"\#(text.count)"}"#.utf8)
            #expect(
                Result { () throws(Wire.Rejection) in try JSONParser.parseObject(envelope, skipping: true) }.failure
                    == rejection, "\(text) as a skipped body")
        }
        #expect(Result { () throws(Wire.Rejection) in try JSONParser.parse(Data([0x22, 0xC3, 0x28, 0x22])) }.failure == .invalidUTF8)
        let invalidBody = Data(#"{"body":""#.utf8) + [0xC3, 0x28] + Data(#""}"#.utf8)
        #expect(Result { () throws(Wire.Rejection) in try JSONParser.parseObject(invalidBody, skipping: true) }.failure == .invalidUTF8)
        #expect(Result { () throws(Wire.Rejection) in try JSONParser.parse(Data(count: Wire.maximumPayload + 1)) }.failure == .tooLarge)
    }

    @Test func integersAreIntegersOnly() throws {
        let cases: [(String, JSONValue)] = [
            ("1", .int(1)), ("-0", .int(0)), ("1.0", .double(1)), ("1e0", .double(1)), ("1001e0", .double(1001)),
            ("9223372036854775807", .int(.max)), ("-9223372036854775808", .int(.min)),
            ("9223372036854775808", .double(9_223_372_036_854_775_808)),
        ]
        for (text, value) in cases { #expect(try JSONParser.parse(Data(text.utf8)) == value, "\(text)") }
        for seq in ["1.0", "1e0", "1001e0", "9223372036854775808"] {
            let text = #"{"body":null,"epoch":1,"reliable":true,"seq":\#(seq),"type":"T","v":2}"#
            #expect(Result { () throws(Wire.Rejection) in try Wire.readEnvelope(Data(text.utf8)) }.failure == .notAnInteger, "\(seq)")
        }
        for v in ["2.0", "1", "3", "\"2\"", "null"] {
            #expect(
                Result { () throws(Wire.Rejection) in
                    try Wire.Member.read(Data(#"{"epoch":1,"participant":"a","v":\#(v)}"#.utf8))
                }.failure == .badVersion)
        }
    }

    static let announcement = Wire.Announcement(
        session: "s1",
        activity: .init(
            type: "com.example.gallery", metadata: .init(title: "T/1", subtitle: "é", type: .watchTogether),
            data: .object(["a": .array([.int(1), .double(2.5), .null])])),
        createdBy: "alice", createdAt: 17, revision: HLCTimestamp(time: 17, counter: 2, participant: "alice"), ttl: 3600)
    static let record = Wire.StateRecord(key: "k", value: .string("v"), clock: HLCTimestamp(time: 5, counter: 0, participant: "bob"))

    @Test func everyRecordReadsBackWhatWasWritten() throws {
        func roundTrip<T: Wire.Readable & Encodable & Equatable>(_ value: T) throws {
            #expect(try T.read(try Wire.encode(value)) == value)
        }
        try roundTrip(Wire.Presence(participant: "alice", status: .online, epoch: 3, name: "Alice"))
        try roundTrip(Wire.Presence(participant: "bob", status: .lost, epoch: 4, name: nil))
        try roundTrip(Wire.Member(participant: "alice", epoch: 3))
        try roundTrip(WireEnvelopeTests.record)
        try roundTrip(WireEnvelopeTests.announcement)
        try roundTrip(Wire.CatchUp(states: [WireEnvelopeTests.record], members: [Wire.Member(participant: "a", epoch: 1)]))
        // The documented bytes (docs/PROTOCOL.md).
        #expect(
            String(decoding: try Wire.encode(Wire.Member(participant: "alice", epoch: 1_796_212_095_667)), as: UTF8.self)
                == #"{"epoch":1796212095667,"participant":"alice","v":2}"#)
    }

    @Test func appValuesGoThroughFoundation() throws {
        let note = WireEnvelopeTests.notes[1]
        let json = try Wire.jsonValue(note)
        #expect(Wire.value(Note.self, from: json) == note)
        #expect(Wire.value(Int.self, from: .double(3)) == 3, "app values follow JSONDecoder's rules")
        #expect(Wire.value(Int.self, from: .string("3")) == nil)
    }

    /// The writer's text reads back as the same value, and is `JSONEncoder`'s text where both apply.
    @Test(arguments: [
        JSONValue.null, .bool(true), .int(-42), .double(2.5), .double(3), .double(1e300), .string("a/\"\\\n\u{1}ü"),
        .array([.int(1), .null, .array([])]),
        .object(["b": .int(1), "a": .object(["z": .string("x"), "c": .array([.bool(false)])]), "": .null]),
    ])
    func theWriterWritesWhatJSONEncoderWrites(value: JSONValue) throws {
        var text: [UInt8] = []
        JSONWriter.append(value, to: &text)
        #expect(try JSONParser.parse(Data(text)) == value || value == .double(3))
        #expect(String(decoding: text, as: UTF8.self) == String(decoding: try Wire.encode(value), as: UTF8.self))
    }

    /// The control messages of reliable delivery as PROTOCOL.md shows them: what the Swift writer makes
    /// (they reach the wire only after a broker lost messages, so the document's capture cannot show them).
    @Test func theReliableDeliveryExamplesAreWhatTheWriterMakes() throws {
        func envelope(_ type: SessionCore.Control, _ body: some Encodable, epoch: Int64) throws -> String {
            let bytes = Wire.EnvelopeBytes(encodedBody: try Wire.encode(body)).finished(
                type: type.rawValue, epoch: epoch, seq: nil, reliable: true)
            return String(decoding: bytes, as: UTF8.self)
        }
        let path = DocumentedReader.repository.appendingPathComponent("docs/PROTOCOL.md").path
        let document = try String(contentsOfFile: path, encoding: .utf8)
        for example in [
            try envelope(.resend, Wire.Resend(stream: .all, from: 4, to: 6), epoch: 1_796_326_046_897),
            try envelope(.skip, Wire.Skip(stream: .all, through: 4, lost: [4...4]), epoch: 1_796_326_046_893),
            try envelope(.position, Wire.Position(all: 6, direct: ["bob": 2]), epoch: 1_796_326_046_893),
        ] {
            #expect(document.contains(example), "\(example)")
        }
        let broadcast = Data(#"{"body":{"text":"hello"},"epoch":1,"reliable":true,"seq":1,"type":"Chat","v":2}"#.utf8)
        #expect(
            String(decoding: Wire.resentBroadcast(broadcast), as: UTF8.self)
                == #"{"body":{"text":"hello"},"epoch":1,"reliable":true,"seq":1,"stream":"all","type":"Chat","v":2}"#)
    }
}

extension Result {
    var failure: Failure? { if case let .failure(error) = self { error } else { nil } }
}
