extension Duration {
    /// As seconds, with a fraction.
    var seconds: Double { Double(components.seconds) + Double(components.attoseconds) / 1e18 }
}
