import Foundation

/// The retained JSON payload of a Home Assistant MQTT discovery config topic
/// (`<prefix>/<component>/<node_id>/<object_id>/config`) for a `sensor` or a `binary_sensor`, in Home
/// Assistant's long key names. Optional keys that are nil are left out.
struct HomeAssistantEntityConfig: Encodable, Hashable {
    /// The entity platforms the dashboard publishes.
    enum Component: String, Hashable, CaseIterable {
        case sensor
        case binarySensor = "binary_sensor"
    }

    /// The `device` block: entities with the same identifiers are one device in Home Assistant.
    struct Device: Encodable, Hashable {
        var identifiers: [String]
        var name: String
        var manufacturer: String
        var model: String
        /// The identifier of the device this one is reached through (an activity's device → its group's).
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

    /// Not in the payload: the levels of the config topic, `<component>/<node_id>/<topicObjectID>/config`.
    var component = Component.sensor
    var topicObjectID: String
    var name: String
    var uniqueID: String
    /// What Home Assistant makes the entity ID from (`sensor.<object_id>`), instead of the device and
    /// entity names: the same on every run, so automations can name the entity.
    var objectID: String
    var stateTopic: String
    var availabilityTopic: String
    var payloadAvailable = "online"
    var payloadNotAvailable = "offline"
    var device: Device
    var origin = Origin(name: "groupsync dashboard")
    /// `measurement` for numeric sensors: Home Assistant then keeps statistics and draws graphs.
    var stateClass: String?
    var unitOfMeasurement: String?
    /// `connectivity` for a binary sensor that says whether something is connected.
    var deviceClass: String?
    /// A binary sensor's payloads for on and off.
    var payloadOn: String?
    var payloadOff: String?
    /// A Jinja template that turns the state topic's payload into the state (`value_json` is the parsed JSON).
    var valueTemplate: String?
    /// A topic whose payload, through ``jsonAttributesTemplate``, gives a JSON object whose keys become
    /// the entity's attributes.
    var jsonAttributesTopic: String?
    var jsonAttributesTemplate: String?
    var icon: String?

    enum CodingKeys: String, CodingKey {
        case name, device, origin, icon
        case uniqueID = "unique_id"
        case objectID = "object_id"
        case stateTopic = "state_topic"
        case availabilityTopic = "availability_topic"
        case payloadAvailable = "payload_available"
        case payloadNotAvailable = "payload_not_available"
        case stateClass = "state_class"
        case unitOfMeasurement = "unit_of_measurement"
        case deviceClass = "device_class"
        case payloadOn = "payload_on"
        case payloadOff = "payload_off"
        case valueTemplate = "value_template"
        case jsonAttributesTopic = "json_attributes_topic"
        case jsonAttributesTemplate = "json_attributes_template"
    }

    private static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        return encoder
    }()

    /// The payload as published: compact JSON, keys sorted (so equal configs are equal strings).
    var json: String {
        // Only strings, arrays and nested structs of strings: encoding cannot fail.
        String(decoding: (try? HomeAssistantEntityConfig.encoder.encode(self)) ?? Data("{}".utf8), as: UTF8.self)
    }
}
