import Foundation
import Testing

@testable import GroupSync

/// A received state record keeps its value's text, which the app's type is decoded from, only where that
/// gives what decoding the parsed value written out again gives — what a late joiner's catch-up holds.
@Suite struct StateRecordTextTests {
    static func record(_ value: String) throws -> Wire.StateRecord {
        try Wire.StateRecord.read(Data(#"{"clock":{"c":0,"p":"zed","t":1},"key":"k","v":2,"value":\#(value)}"#.utf8))
    }

    static func twoWays<T: Decodable & Equatable>(_ value: String, as type: T.Type) throws -> (text: T?, parsed: T?) {
        let record = try record(value)
        return (record.decoded(as: type), Wire.value(type, from: record.value))
    }

    @Test func ordinaryValuesAreDecodedFromTheirTextAsFromTheirParsedValue() throws {
        let values = ["42", "-7", "0", "9223372036854775807", "12.5", "0.1", "-2.5", "0.001", "1e+308", "2.5e-300", "1e-05"]
        for value in values {
            #expect(try Self.record(value).text == Data(value.utf8), "\(value) keeps its text")
            let double = try Self.twoWays(value, as: Double.self)
            #expect(double.text == double.parsed && double.text != nil, "\(value) as a Double")
            let decimal = try Self.twoWays(value, as: Decimal.self)
            #expect(decimal.text == decimal.parsed, "\(value) as a Decimal")
            let integer = try Self.twoWays(value, as: Int.self)
            #expect(integer.text == integer.parsed, "\(value) as an Int")
        }
        let nested = #"{"name":"caf\u00e9","sizes":[1,2.5,"x"],"on":true,"none":null}"#
        #expect(try Self.record(nested).text != nil)
        let dictionary = try Self.twoWays(nested, as: [String: JSONValue].self)
        #expect(dictionary.text == dictionary.parsed && dictionary.text?["name"] == .string("café"))
    }

    /// A number not written as its parsed value is written out again leaves the text out: the two ways
    /// could differ (a `UInt64` beyond `Int64`, a `Decimal` of many digits, a `Double` from `0e5`).
    @Test func otherNumbersAreDecodedFromTheParsedValueOnly() throws {
        let values = [
            "18446744073709551615", "3.14159265358979323846", "1.0000000000000001", "-0", "-0.0", "1e2", "1E2",
            "12.50", "0e5", "0.00e1", "0.00001", "0.\(String(repeating: "0", count: 130))1e131", "[1, 1234567890123456789012]",
        ]
        for value in values { #expect(try Self.record(value).text == nil, "\(value)") }
        #expect(try Self.record(#"{"a":1.5}"#).text != nil)
        #expect(try Self.twoWays("18446744073709551615", as: UInt64.self) == (nil, nil), "beyond Int64 it is a Double")
    }
}
