// A test or the bench imports this one module and gets the broker and the deadline helper with it.
@_exported import BrokerSupport
