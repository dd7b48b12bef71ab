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
        for value in ["42", "-7", "0", "9223372036854775807", "1e2", "12.50", "0.1", "-0.0", "123456789012345", "1e308", "2.5e-300"] {
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

    /// Numbers the parsed value does not state exactly leave the text out: the two ways would differ.
    @Test func inexactNumbersAreDecodedFromTheParsedValueOnly() throws {
        for value in [
            "18446744073709551615", "3.14159265358979323846", "1.0000000000000001", "1e-320", "1e-400", "-0", "[1, 1234567890123456789012]",
        ] {
            #expect(try Self.record(value).text == nil, "\(value)")
        }
        #expect(try Self.record(#"{"a":1.5}"#).text != nil)
        #expect(try Self.twoWays("18446744073709551615", as: UInt64.self) == (nil, nil), "beyond Int64 it is a Double")
    }
}
