import Foundation

/// The retained JSON payload of a Home Assistant MQTT discovery config topic for a `sensor`
/// (`<prefix>/sensor/<node_id>/<object_id>/config`), in Home Assistant's long key names. Optional keys
/// that are nil are left out.
struct HomeAssistantSensorConfig: Encodable, Hashable {
    /// The `device` block: entities with the same identifiers are one device in Home Assistant.
    struct Device: Encodable, Hashable {
        var identifiers: [String]
        var name: String
        var manufacturer: String
        var model: String
        /// The identifier of the device this one is reached through (a session's device → its group's).
        var viaDevice: String?

        enum CodingKeys: String, CodingKey {
            case identifiers, name, manufacturer, model
            case viaDevice = "via_device"
        }
    }

    /// The `origin` block: which application published the config (shown in Home Assistant's logs).
    struct Origin: Encodable, Hashable {
        var name: String
        var supportURL: String?

        enum CodingKeys: String, CodingKey {
            case name
            case supportURL = "support_url"
        }
    }

    var name: String
    var uniqueID: String
    var stateTopic: String
    var availabilityTopic: String
    var payloadAvailable = "online"
    var payloadNotAvailable = "offline"
    var device: Device
    var origin = Origin(name: "groupsync dashboard")
    /// `measurement` for numeric sensors: Home Assistant then keeps statistics and draws graphs.
    var stateClass: String?
    var unitOfMeasurement: String?
    /// A Jinja template that turns the state topic's payload into the state (`value_json` is the parsed JSON).
    var valueTemplate: String?
    /// A topic holding a JSON object whose keys become the entity's attributes.
    var jsonAttributesTopic: String?
    var icon: String?

    enum CodingKeys: String, CodingKey {
        case name, device, origin, icon
        case uniqueID = "unique_id"
        case stateTopic = "state_topic"
        case availabilityTopic = "availability_topic"
        case payloadAvailable = "payload_available"
        case payloadNotAvailable = "payload_not_available"
        case stateClass = "state_class"
        case unitOfMeasurement = "unit_of_measurement"
        case valueTemplate = "value_template"
        case jsonAttributesTopic = "json_attributes_topic"
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The payload as published: compact JSON, keys sorted (so equal configs are equal strings).
    var json: String {
        // Only strings, arrays and nested structs of strings: encoding cannot fail.
        String(decoding: (try? HomeAssistantSensorConfig.encoder.encode(self)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
