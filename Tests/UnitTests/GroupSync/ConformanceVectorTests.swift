import Foundation
import Testing

@testable import GroupSync

/// Runs every vector of docs/conformance/ (format: docs/conformance/README.md) through the Swift codec.
@Suite struct ConformanceVectorTests {
    static let directory = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("docs/conformance")

    static let files = ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? [])
        .filter { $0.hasSuffix(".json") }.sorted()

    enum Outcome: Equatable, CustomStringConvertible {
        case accept(JSONValue), reject(String), cleared

        var description: String {
            switch self {
            case let .accept(json): "accept \(String(decoding: (try? Wire.encode(json)) ?? Data(), as: UTF8.self))"
            case let .reject(code): "reject \(code)"
            case .cleared: "cleared"
            }
        }
    }

    struct Vector {
        var name: String
        var topic: String
        var payload: Data
        var expected: Outcome
        /// For a state record of a key the protocol reserves: what its value means.
        var meaning: Outcome?
    }

    static func vectors(in file: String) throws -> [Vector] {
        let json = try JSONValue.read(try Data(contentsOf: directory.appendingPathComponent(file)))
        guard case let .object(root) = json, case let .array(vectors)? = root["vectors"] else { throw Wire.Rejection.wrongShape }
        return try vectors.map { vector throws -> Vector in
            guard case let .object(fields) = vector, case let .string(name)? = fields["name"], case let .string(topic)? = fields["topic"]
            else {
                throw Wire.Rejection.wrongShape
            }
            var payload: Data
            switch (fields["payload"], fields["payload_base64"]) {
            case let (.string(text)?, nil): payload = Data(text.utf8)
            case let (nil, .string(base64)?): payload = try #require(Data(base64Encoded: base64))
            default: throw Wire.Rejection.wrongShape
            }
            if case let .int(size)? = fields["pad_to"] { payload.append(Data(repeating: 0x20, count: Int(size) - payload.count)) }
            let expected: Outcome
            switch (fields["accept"], fields["reject"], fields["cleared"]) {
            case let (record?, nil, nil): expected = .accept(record)
            case let (nil, .string(code)?, nil): expected = .reject(code)
            case (nil, nil, .bool(true)?): expected = .cleared
            default: throw Wire.Rejection.wrongShape
            }
            var meaning: Outcome?
            switch fields["meaning"] {
            case nil: meaning = nil
            case let .object(outcome)?:
                switch (outcome["accept"], outcome["reject"]) {
                case let (value?, nil): meaning = .accept(value)
                case let (nil, .string(code)?): meaning = .reject(code)
                default: throw Wire.Rejection.wrongShape
                }
            default: throw Wire.Rejection.wrongShape
            }
            return Vector(name: name, topic: topic, payload: payload, expected: expected, meaning: meaning)
        }
    }

    /// What the codec makes of a message, with the library's own identity checks (`Wire+Identity.swift`).
    static func outcome(topic: String, payload: Data) -> Outcome {
        guard let kind = GroupTopics(group: "g").parse(topic) else { return .reject("bad-topic") }
        func record<T: Wire.Readable & Encodable>(_ type: T.Type, _ check: (T) -> String?) -> Outcome {
            if payload.isEmpty { return .cleared }
            do throws(Wire.Rejection) {
                let value = try type.read(payload)
                return check(value).map(Outcome.reject) ?? .accept(json(value))
            } catch {
                return .reject(error.rawValue)
            }
        }
        switch kind {
        case let .presence(participant):
            return record(Wire.Presence.self) { $0.matches(participant: participant) ? nil : "identity-mismatch" }
        case .welcome:
            return payload.isEmpty ? .reject("malformed") : record(Wire.Welcome.self) { _ in nil }
        case .observe:
            return payload.isEmpty ? .reject("malformed") : record(Wire.Observe.self) { _ in nil }
        case .heartbeat:
            // Not a retained topic: nothing to clear, so an empty payload is just not JSON.
            return payload.isEmpty ? .reject("malformed") : record(Wire.Heartbeat.self) { _ in nil }
        case let .announcement(session, _):
            return record(Wire.Announcement.self) {
                !$0.matches(session: session) ? "identity-mismatch" : Identifier.isValid($0.activity.type) ? nil : "bad-identifier"
            }
        case let .member(_, participant):
            return record(Wire.Member.self) { $0.matches(participant: participant) ? nil : "identity-mismatch" }
        case let .state(_, key, writer):
            return record(Wire.StateRecord.self) { $0.matches(key: key, writer: writer) ? nil : "identity-mismatch" }
        case let .journal(_, attachment, owner):
            return record(Wire.JournalRecord.self) { $0.matches(attachment: attachment, owner: owner) ? nil : "identity-mismatch" }
        case .broadcast, .direct:
            do throws(Wire.Rejection) {
                let envelope = try Wire.readEnvelope(payload)
                let bodyBytes = payload[envelope.body]
                let body: JSONValue
                switch envelope.header.type {
                case "$catchup": body = json(try Wire.CatchUp.read(bodyBytes))
                case "$resend": body = json(try Wire.Resend.read(bodyBytes))
                case "$skip": body = json(try Wire.Skip.read(bodyBytes))
                case "$position": body = json(try Wire.Position.read(bodyBytes))
                case "$ping": body = json(try Wire.Ping.read(bodyBytes))
                case "$pong": body = json(try Wire.Pong.read(bodyBytes))
                case "$chunks": body = json(try Wire.ChunkRequest.read(bodyBytes))
                case "$have": body = json(try Wire.Have.read(bodyBytes))
                default: body = try JSONParser.parse(bodyBytes)
                }
                let header = envelope.header
                var fields: [String: JSONValue] = [
                    "body": body, "epoch": .int(header.epoch), "reliable": .bool(header.reliable), "type": .string(header.type),
                    "v": .int(Int64(header.v)),
                ]
                if let seq = header.seq { fields["seq"] = .int(seq) }
                if let stream = header.stream { fields["stream"] = .string(stream) }
                if let sealed = header.sealed { fields["sealed"] = .string(sealed) }
                return .accept(.object(fields))
            } catch {
                return .reject(error.rawValue)
            }
        }
    }

    /// What the value of a state record means, as playback reads it, for the keys playback reserves; nil for
    /// any other key.
    static func meaning(of payload: Data) -> Outcome? {
        guard let record = Wire.decode(Wire.StateRecord.self, from: payload) else { return nil }
        switch record.key {
        // As the coordinator reads them: the strict reader, and for a clock the check of its writer.
        case PlaybackCoordinator.clockKey:
            guard case let .value(clock) = PlaybackStateMachine.Received<Wire.Clock>(record, valid: { $0.matches(writer: $1) }) else {
                return .reject("bad-clock")
            }
            return .accept(json(clock))
        case PlaybackCoordinator.timelineKey:
            guard case let .value(timeline) = PlaybackStateMachine.Received<Wire.Timeline>(record) else { return .reject("bad-timeline") }
            return .accept(json(PlaybackTimeline(timeline).record))
        default:
            return nil
        }
    }

    /// A record as JSON: what it writes, read back.
    static func json(_ value: some Encodable) -> JSONValue {
        (try? Wire.jsonValue(value)) ?? .null
    }

    /// Numbers compared by value: `JSONEncoder` writes a whole `Double` without a fraction.
    static func normalized(_ json: JSONValue) -> JSONValue {
        switch json {
        case let .double(value) where value == value.rounded() && abs(value) < 0x1p63: .int(Int64(value))
        case let .array(elements): .array(elements.map(normalized))
        case let .object(fields): .object(fields.mapValues(normalized))
        default: json
        }
    }

    @Test(arguments: ConformanceVectorTests.files)
    func everyVectorHoldsForTheSwiftCodec(file: String) throws {
        for vector in try ConformanceVectorTests.vectors(in: file) {
            var actual = ConformanceVectorTests.outcome(topic: vector.topic, payload: vector.payload)
            var expected = vector.expected
            if case let .accept(json) = actual { actual = .accept(ConformanceVectorTests.normalized(json)) }
            if case let .accept(json) = expected { expected = .accept(ConformanceVectorTests.normalized(json)) }
            #expect(actual == expected, "\(file): \(vector.name)")
            if case .accept = actual {
                var meaning = ConformanceVectorTests.meaning(of: vector.payload)
                if case let .accept(json) = meaning { meaning = .accept(ConformanceVectorTests.normalized(json)) }
                let expected = vector.meaning.map { meaning -> Outcome in
                    if case let .accept(json) = meaning { .accept(ConformanceVectorTests.normalized(json)) } else { meaning }
                }
                #expect(meaning == expected, "\(file): \(vector.name) (meaning)")
            }
        }
    }

    @Test func theVectorsCoverEveryRecordAndEveryRejection() throws {
        let files = ConformanceVectorTests.files
        #expect(
            Set(files).isSuperset(of: [
                "announcement.json", "clock.json", "envelope.json", "journal.json", "json.json", "member.json", "playback.json",
                "observe.json", "presence.json", "state.json", "topics.json", "welcome.json",
            ]))
        let codes = Set(
            try files.flatMap { try ConformanceVectorTests.vectors(in: $0) }.compactMap { vector -> String? in
                if case let .reject(code) = vector.expected { code } else { nil }
            })
        #expect(codes == Set(Wire.Rejection.allCases.map(\.rawValue) + ["identity-mismatch", "bad-identifier", "bad-topic"]))
    }

    /// Every playback example of PROTOCOL.md (a `$ping`, a `$pong`, a clock or timeline record) is what the
    /// Swift writer makes of what it says, byte for byte, and a valid value.
    @Test func thePlaybackExamplesOfTheDocumentAreWhatTheWriterMakes() throws {
        let examples = try ConformanceVectorTests.documentLines().filter { line in
            line.hasPrefix("{") && [#""type":"$ping""#, #""type":"$pong""#, #""key":"groupsync."#].contains { line.contains($0) }
        }
        #expect(examples.count == 5)
        for example in examples {
            let payload = Data(example.utf8)
            let rewritten: String
            if let record = Wire.decode(Wire.StateRecord.self, from: payload) {
                guard case let .accept(value)? = ConformanceVectorTests.meaning(of: payload) else {
                    Issue.record("not a valid value: \(example)")
                    continue
                }
                let written = Wire.StateRecord(key: record.key, value: value, clock: record.clock)
                rewritten = String(decoding: try Wire.encode(written), as: UTF8.self)
            } else {
                let envelope = try Wire.readEnvelope(payload)
                let bytes = payload[envelope.body]
                let body: any Encodable =
                    envelope.header.type == "$ping"
                    ? try Wire.Ping.read(bytes) : try Wire.Pong.read(bytes)
                rewritten = String(
                    decoding: Wire.EnvelopeBytes(encodedBody: try Wire.encode(body)).finished(
                        type: envelope.header.type, epoch: envelope.header.epoch, seq: nil, reliable: false), as: UTF8.self)
            }
            #expect(rewritten == example)
        }
    }

    /// The journal record of PROTOCOL.md is consistent, and what the Swift writer makes of what it says.
    @Test func theJournalExampleOfTheDocumentIsWhatTheWriterMakes() throws {
        let examples = try ConformanceVectorTests.documentLines().filter { $0.hasPrefix(#"{"added":"#) }
        #expect(examples.count == 1)
        for example in examples {
            let record = try Wire.JournalRecord.read(Data(example.utf8))
            #expect(String(decoding: try Wire.encode(record), as: UTF8.self) == example)
        }
    }

    /// The lines of docs/PROTOCOL.md.
    static func documentLines() throws -> [String] {
        let path = directory.deletingLastPathComponent().appendingPathComponent("PROTOCOL.md")
        return try String(contentsOf: path, encoding: .utf8).split(separator: "\n").map(String.init)
    }

    /// The same files pass a reader written in another language (docs/conformance/run.py), when python3
    /// is installed.
    @Test(.enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/python3")))
    func thePythonReaderPassesTheSameVectors() throws {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/python3")
        process.arguments = [ConformanceVectorTests.directory.appendingPathComponent("run.py").path]
        let output = Pipe()
        process.standardOutput = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        #expect(process.terminationStatus == 0, "\(text)")
    }
}
