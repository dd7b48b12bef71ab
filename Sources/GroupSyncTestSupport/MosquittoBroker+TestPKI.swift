import BrokerSupport

extension MosquittoBroker.Configuration.TLSListener {
    /// The server side of a ``TestPKI`` set: its CA, server certificate and key.
    public init(_ files: TestPKI.Files, requireClientCertificate: Bool = false) {
        self.init(
            caFile: files.caCert,
            certFile: files.serverCert,
            keyFile: files.serverKey,
            requireClientCertificate: requireClientCertificate
        )
    }
}
