import CMosquitto
import Foundation

/// MQTT 5 properties between ``MQTTProperties`` and libmosquitto's property lists.
extension MosquittoConnection {
    static func add(_ properties: MQTTProperties, to list: inout OpaquePointer?) {
        if let expiry = properties.messageExpiry {
            mosquitto_property_add_int32(&list, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), expiry)
        }
        if let contentType = properties.contentType {
            mosquitto_property_add_string(&list, Int32(MQTT_PROP_CONTENT_TYPE.rawValue), contentType)
        }
        if let responseTopic = properties.responseTopic {
            mosquitto_property_add_string(&list, Int32(MQTT_PROP_RESPONSE_TOPIC.rawValue), responseTopic)
        }
        if let data = properties.correlationData {
            data.withUnsafeBytes { bytes in
                _ = mosquitto_property_add_binary(
                    &list, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), bytes.baseAddress, UInt16(clamping: bytes.count))
            }
        }
        for pair in properties.userProperties {
            mosquitto_property_add_string_pair(&list, Int32(MQTT_PROP_USER_PROPERTY.rawValue), pair.name, pair.value)
        }
    }

    static func readProperties(_ list: OpaquePointer) -> MQTTProperties {
        var result = MQTTProperties()
        var property: OpaquePointer? = list
        while let current = property {
            switch Int(mosquitto_property_identifier(current)) {
            case Int(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue):
                var value: UInt32 = 0
                mosquitto_property_read_int32(current, Int32(MQTT_PROP_MESSAGE_EXPIRY_INTERVAL.rawValue), &value, false)
                result.messageExpiry = value
            case Int(MQTT_PROP_CONTENT_TYPE.rawValue):
                result.contentType = readString(current, MQTT_PROP_CONTENT_TYPE)
            case Int(MQTT_PROP_RESPONSE_TOPIC.rawValue):
                result.responseTopic = readString(current, MQTT_PROP_RESPONSE_TOPIC)
            case Int(MQTT_PROP_CORRELATION_DATA.rawValue):
                var value: UnsafeMutableRawPointer? = nil
                var length: UInt16 = 0
                mosquitto_property_read_binary(current, Int32(MQTT_PROP_CORRELATION_DATA.rawValue), &value, &length, false)
                if let value {
                    result.correlationData = Array(UnsafeRawBufferPointer(start: value, count: Int(length)))
                    free(value)
                }
            case Int(MQTT_PROP_USER_PROPERTY.rawValue):
                var name: UnsafeMutablePointer<CChar>? = nil
                var value: UnsafeMutablePointer<CChar>? = nil
                mosquitto_property_read_string_pair(current, Int32(MQTT_PROP_USER_PROPERTY.rawValue), &name, &value, false)
                if let name, let value {
                    result.userProperties.append(.init(String(cString: name), String(cString: value)))
                }
                free(name)
                free(value)
            case Int(MQTT_PROP_SUBSCRIPTION_IDENTIFIER.rawValue):
                var value: UInt32 = 0
                mosquitto_property_read_varint(current, Int32(MQTT_PROP_SUBSCRIPTION_IDENTIFIER.rawValue), &value, false)
                result.subscriptionIdentifiers.append(value)
            default:
                break
            }
            property = mosquitto_property_next(current)
        }
        return result
    }

    private static func readString(_ property: OpaquePointer, _ identifier: mqtt5_property) -> String? {
        var value: UnsafeMutablePointer<CChar>? = nil
        mosquitto_property_read_string(property, Int32(identifier.rawValue), &value, false)
        defer { free(value) }
        return value.map { String(cString: $0) }
    }
}
