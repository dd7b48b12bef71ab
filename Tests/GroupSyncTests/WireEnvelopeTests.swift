import Foundation
import Testing
@testable import GroupSync

/// The envelope fast paths (``Wire/encodeEnvelope(type:epoch:seq:reliable:body:)`` and
/// ``Wire/scanEnvelope(_:)``) must be indistinguishable on the wire from `JSONEncoder`/`JSONDecoder`.
@Suite struct WireEnvelopeTests {
    struct Note: Codable, Sendable, Equatable {
        var text: String
        var tags: [String: Int]
        var nested: [[Double]]
        var flag: Bool?
    }

    static let notes = [
        Note(text: "plain", tags: [:], nested: [], flag: nil),
        Note(text: "quote \" backslash \\ slash / tab \t newline \n bell \u{7} é 🎉", tags: ["b": 2, "a": 1], nested: [[1.5, -2e10], []], flag: true),
    ]

    @Test(arguments: ["Ping", "Array<Int>", "we\"ird\\type\u{1}/ü", ""])
    func encodedEnvelopeIsByteForByteWhatJSONEncoderWrites(type: String) throws {
        for note in WireEnvelopeTests.notes {
            for (seq, reliable) in [(Int64(1), true), (Int64.max, false)] {
                let fast = try Wire.encodeEnvelope(type: type, epoch: -42, seq: seq, reliable: reliable, body: note)
                let reference = try Wire.encode(Wire.Envelope(type: type, epoch: -42, seq: seq, reliable: reliable, body: note))
                #expect(fast == reference, "\(String(decoding: fast, as: UTF8.self))")
                let scanned = try #require(Wire.scanEnvelope(fast))
                #expect(scanned.header == Wire.EnvelopeHeader(v: 1, type: type, epoch: -42, seq: seq, reliable: reliable))
                if let body = scanned.body {
                    #expect(Wire.decode(Note.self, from: fast[body]) == note)
                } else {
                    #expect(type.contains { $0 == "\"" || $0 == "\\" || $0.asciiValue.map { $0 < 0x20 } == true }, "only an escaped type leaves the fast path")
                }
            }
        }
        // Fragments as bodies: raw bytes travel as a base64 string.
        let data = Data([0, 1, 2, 250])
        let fast = try Wire.encodeEnvelope(type: "Data", epoch: 1, seq: 1, reliable: true, body: data)
        #expect(fast == (try Wire.encode(Wire.Envelope(type: "Data", epoch: 1, seq: 1, reliable: true, body: data))))
        let body = try #require(Wire.scanEnvelope(fast)?.body)
        #expect(Wire.decode(Data.self, from: fast[body]) == data)
    }

    @Test func otherClientsFormattingTakesTheFastPath() throws {
        // Pretty-printed, other key order, unknown keys (a client in another language may write this).
        let text = """
            {
              "v" : 1, "seq": 7, "extra": {"a": [1, 2.5e3, "x\\"y", {"b": null}], "c": []},
              "type" : "Note", "reliable" : false,
              "body" : { "text" : "hi", "tags": {}, "nested": [[1]] },
              "epoch": 1796214382038
            }
            """
        let payload = Data(text.utf8)
        let scanned = try #require(Wire.scanEnvelope(payload))
        #expect(scanned.header == Wire.EnvelopeHeader(v: 1, type: "Note", epoch: 1796214382038, seq: 7, reliable: false))
        let body = try #require(scanned.body)
        #expect(Wire.decode(Note.self, from: payload[body]) == Note(text: "hi", tags: [:], nested: [[1]], flag: nil))
    }

    @Test func unusualEnvelopesAreLeftToJSONDecoder() throws {
        let unusual = [
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"typ\u0065":"T","v":1}"#,  // escaped key
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"type":"\u0054","v":1}"#,  // escaped type
            #"{"body":1,"epoch":1.0,"reliable":true,"seq":1,"type":"T","v":1}"#,  // integral float
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"seq":2,"type":"T","v":1}"#,  // repeated key
        ]
        for text in unusual {
            let payload = Data(text.utf8)
            let reference = Wire.decodeVersioned(Wire.EnvelopeHeader.self, from: payload)
            let scanned = Wire.scanEnvelope(payload)
            #expect(scanned?.header == reference, "\(text)")
            #expect(scanned?.body == nil, "the whole envelope is decoded: \(text)")
        }
    }

    @Test func nonEnvelopesAreRejected() {
        let rejected = [
            "", "{", "[]", "null", #"{"v":1}"#,
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"type":"T","v":2}"#,  // other version
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"type":"T","v":1} x"#,  // trailing bytes
            #"{"body":1,"epoch":1,"reliable":true,"seq":1,"type":"T","v":1"#,  // truncated
            #"{"body":[1,2,"epoch":1,"reliable":true,"seq":1,"type":"T","v":1}"#,  // unbalanced body
            #"{"body":{"a"},"epoch":1,"reliable":true,"seq":1,"type":"T","v":1}"#,  // key without value
            #"{"body":1,"epoch":1,"reliable":"yes","seq":1,"type":"T","v":1}"#,  // wrong kind
            #"{"body":1,"epoch":99999999999999999999,"reliable":true,"seq":1,"type":"T","v":1}"#,  // overflow
            #"{"body":1,"epoch":01,"reliable":true,"seq":1,"type":"T","v":1}"#,  // leading zero
        ]
        for text in rejected {
            #expect(Wire.scanEnvelope(Data(text.utf8)) == nil, "\(text)")
        }
    }

    @Test func fastJSONReadsWhatJSONDecoderReads() throws {
        let handled = [
            #"{"a":[1,-2,true,false,null,"x"],"b":{"c":{}},"d":[]}"#,
            #"  "quote \" slash \/ backslash \\ \b\f\n\r\t é \u00e9 \ud83c\udf89 🎉"  "#,
            #"9223372036854775807"#, #"-9223372036854775808"#, #"0"#,
        ]
        for text in handled {
            let data = Data(text.utf8)
            let fast = try #require(JSONValue.parseFast(data), "\(text)")
            #expect(fast == Wire.decode(JSONValue.self, from: data), "\(text)")
        }
        let leftToJSONDecoder = [
            "1.5", "1e3", "-0", "9223372036854775808", #"{"a":1,"a":2}"#, #""\ud800""#, #""\x""#,
            String(repeating: "[", count: 65) + String(repeating: "]", count: 65), "[1,]", "{", "01", "",
        ]
        for text in leftToJSONDecoder {
            #expect(JSONValue.parseFast(Data(text.utf8)) == nil, "\(text)")
        }
        #expect(JSONValue.parseFast(Data([0x22, 0xFF, 0x22])) == nil, "invalid UTF-8")
    }

    @Test func fastRecordsAreWhatJSONDecoderReads() throws {
        let record = Wire.StateRecord(key: "k", value: .object(["x": .array([.int(1), .string("y")])]),
                                      clock: HLCTimestamp(time: 1_796_214_382_038, counter: 3, participant: "bob"))
        let data = try Wire.encode(record)
        #expect(Wire.decodeFast(Wire.StateRecord.self, from: data) == record)
        let presence = Wire.Presence(participant: "a", status: .lost, epoch: 9, name: "Ann")
        #expect(Wire.decodeFast(Wire.Presence.self, from: try Wire.encode(presence)) == presence)
        let member = Wire.Member(participant: "a", epoch: 9)
        #expect(Wire.decodeFast(Wire.Member.self, from: try Wire.encode(member)) == member)
        // Shapes the fast path does not take still decode (or fail) exactly as before.
        for text in [#"{"v":1,"key":"k","value":1.5,"clock":{"t":1,"c":0,"p":"a"}}"#,
                     #"{"v":1,"key":"k","clock":{"t":1,"c":0,"p":"a"}}"#,
                     #"{"v":2,"key":"k","value":1,"clock":{"t":1,"c":0,"p":"a"}}"#,
                     #"{"v":1,"key":"k","value":null,"clock":{"t":1,"c":0,"p":"a"},"extra":[1]}"#] {
            let data = Data(text.utf8)
            #expect(Wire.decodeFast(Wire.StateRecord.self, from: data) == Wire.decodeVersioned(Wire.StateRecord.self, from: data), "\(text)")
        }
    }
}
