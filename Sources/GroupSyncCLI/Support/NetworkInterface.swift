import Foundation

/// The host's network interfaces, through `getifaddrs`.
enum NetworkInterface {
    /// The name of the interface that holds the IPv4 or IPv6 `address` (`lo` for 127.0.0.1), or nil when
    /// no interface does or `address` is not a numeric address.
    static func name(holding address: String) -> String? {
        var wanted4 = in_addr(), wanted6 = in6_addr()
        let isIPv4 = inet_pton(AF_INET, address, &wanted4) == 1
        guard isIPv4 || inet_pton(AF_INET6, address, &wanted6) == 1 else { return nil }
        var first: UnsafeMutablePointer<ifaddrs>?
        guard getifaddrs(&first) == 0 else { return nil }
        defer { freeifaddrs(first) }
        var entry = first
        while let current = entry {
            defer { entry = current.pointee.ifa_next }
            guard let socketAddress = current.pointee.ifa_addr else { continue }
            let family = Int32(socketAddress.pointee.sa_family)
            let matches: Bool
            if isIPv4 && family == AF_INET {
                let candidate = socketAddress.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { $0.pointee.sin_addr }
                matches = candidate.s_addr == wanted4.s_addr
            } else if !isIPv4 && family == AF_INET6 {
                var candidate = socketAddress.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { $0.pointee.sin6_addr }
                matches = withUnsafeBytes(of: &candidate) { a in withUnsafeBytes(of: &wanted6) { b in a.elementsEqual(b) } }
            } else {
                matches = false
            }
            if matches { return String(cString: current.pointee.ifa_name) }
        }
        return nil
    }
}
