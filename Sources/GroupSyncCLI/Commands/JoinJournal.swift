import Foundation
import GroupSync
import MQTT

/// The journal of the session `groupsync join` joined: its `!attach`, `!attachments` and `!load` lines,
/// and the `attachment +`/`attachment -` lines of what anyone adds or removes.
struct JoinJournal: Sendable {
    let journal: GroupSessionJournal
    /// Loads under way: they go on while stdin is read, and are cancelled by ``cancelLoads()``.
    private let loads = LockedValue<[Task<Void, Never>]>([])

    /// A load's progress line comes at most once per second, besides its first and last.
    static let progressInterval: Duration = .seconds(1)

    static let help = """
          !attach PATH      add the file to the session's journal, which everyone (late joiners included)
                            can load: attached N OWNER DIGEST SIZE TYPE NAME
          !attachments      list the journal: attachment N OWNER DIGEST SIZE TYPE NAME
          !load N|DIG PATH  load attachment N (or the one whose digest starts with DIG) to PATH, verified:
                            loading DIG DONE/TOTAL bytes (each second), loaded DIGEST SIZE bytes to PATH …
        """

    init(_ journal: GroupSessionJournal) {
        self.journal = journal
    }

    /// Carries out `line` when it is one of the journal's commands; false for any other line.
    func handle(_ line: String) async -> Bool {
        let words = line.split(separator: " ", maxSplits: 1).map(String.init)
        let rest = words.count > 1 ? words[1].trimmingCharacters(in: .whitespaces) : ""
        switch words.first {
        case "!attach":
            guard !rest.isEmpty else {
                Output.error("usage: !attach PATH")
                return true
            }
            await attach(NSString(string: rest).expandingTildeInPath)
        case "!attachments":
            let attachments = journal.attachments
            if attachments.isEmpty { Output.line("attachments none") }
            for (index, attachment) in attachments.enumerated() { Output.line("attachment \(index + 1) \(Self.describe(attachment))") }
        case "!load":
            let arguments = rest.split(separator: " ", maxSplits: 1).map(String.init)
            guard arguments.count == 2 else {
                Output.error("usage: !load N|DIGEST-PREFIX PATH")
                return true
            }
            load(arguments[0], to: NSString(string: arguments[1].trimmingCharacters(in: .whitespaces)).expandingTildeInPath)
        default:
            return false
        }
        return true
    }

    /// Prints a line for every attachment added to or removed from the journal, by anyone (those there
    /// at the join first), until cancelled.
    func follow() -> Task<Void, Never> {
        let lists = journal.attachmentUpdates()
        return Task {
            var known: [JournalAttachment] = []
            for await list in lists {
                let (before, after) = (Set(known.map(\.id)), Set(list.map(\.id)))
                for removed in known where !after.contains(removed.id) { Output.line("attachment - \(Self.describe(removed))") }
                for added in list where !before.contains(added.id) { Output.line("attachment + \(Self.describe(added))") }
                known = list
            }
        }
    }

    func cancelLoads() {
        for load in loads.withLock({ $0 }) { load.cancel() }
    }

    private func attach(_ path: String) async {
        do {
            let attachment = try await journal.add(contentsOf: URL(fileURLWithPath: path), mediaType: MediaType.guess(for: path))
            let number = journal.attachments.firstIndex { $0.id == attachment.id }.map { "\($0 + 1)" } ?? "-"
            Output.line("attached \(number) \(Self.describe(attachment))")
        } catch {
            Output.error("could not attach \(path): \(error)")
        }
    }

    /// Starts loading the attachment `which` (a number in the list, or a prefix of its digest) to `path`.
    private func load(_ which: String, to path: String) {
        let attachments = journal.attachments
        let matches: [JournalAttachment]
        if let number = Int(which), number >= 1 {
            matches = number <= attachments.count ? [attachments[number - 1]] : []
        } else {
            matches = attachments.filter { $0.digest.hasPrefix(which.lowercased()) }
        }
        guard matches.count == 1, let attachment = matches.first else {
            Output.error(
                matches.isEmpty
                    ? "no attachment \(which) (see !attachments)" : "\(matches.count) attachments match \(which): give more digits")
            return
        }
        let journal = self.journal
        let throttle = LockedValue(ProgressThrottle(interval: Self.progressInterval))
        let short = attachment.digest.prefix(12)
        let task = Task {
            do {
                try await journal.load(attachment, to: URL(fileURLWithPath: path)) { progress in
                    guard throttle.withLock({ $0.admits(progress) }) else { return }
                    Output.line("loading \(short) \(progress.completedBytes)/\(progress.totalBytes) bytes")
                }
                Output.line("loaded \(attachment.digest) \(attachment.size) bytes to \(path) (every chunk verified)")
            } catch {
                Output.error("could not load \(attachment.name): \(error)")
            }
        }
        loads.withLock { $0.append(task) }
    }

    /// `OWNER DIGEST SIZE TYPE NAME`.
    static func describe(_ attachment: JournalAttachment) -> String {
        "\(attachment.owner.id) \(attachment.digest) \(attachment.size) \(attachment.mediaType) \(attachment.name)"
    }
}
