// A test or the bench imports this one module and gets the broker and the deadline helpers (in MQTT) with
// it.
@_exported import BrokerSupport
@_exported import MQTT
