/// A sequence of updates from GroupSync: sessions as they are announced, a session's state, its active
/// participants, its activity, whether anything is shared.
///
/// - Ordering: elements come in the order they happened; where the producing call says so, a slow
///   consumer skips intermediate elements and gets the newest.
/// - Ending: when what it follows is over (the session is invalidated, the coordinator closes), after
///   the elements already produced; also when the iterating task is cancelled, or when the sequence and
///   its iterators are dropped.
/// - One task at a time may iterate it.
public struct GroupUpdates<Element: Sendable>: AsyncSequence, Sendable {
    private let produce: @Sendable () async -> Element?

    /// The elements of `inbox` that `transform` turns into an `Element` (the others are skipped).
    init<Source>(_ inbox: Inbox<Source>, transform: @escaping @Sendable (Source) -> Element?) {
        let consumer = Inbox.Consumer(inbox)
        produce = {
            while let source = await consumer.inbox.next() {
                if let element = transform(source) { return element }
            }
            return nil
        }
    }

    init(_ inbox: Inbox<Element>) { self.init(inbox) { $0 } }

    public struct AsyncIterator: AsyncIteratorProtocol {
        fileprivate let produce: @Sendable () async -> Element?

        public func next() async -> Element? { await produce() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(produce: produce) }
}

/// The sessions of one activity type, as they are announced. See ``GroupCoordinator/sessions(of:)``.
public typealias GroupSessions<Activity: GroupActivity> = GroupUpdates<GroupSession<Activity>>
