import Foundation
import GroupSync
import MQTT

/// The activity of `groupsync demo --playback`: a film the group watches together.
struct MovieActivity: GroupActivity {
    static let activityIdentifier = "com.example.movie"
    var movie: String
    var metadata: GroupActivityMetadata { .init(title: "Movie \(movie)", type: .watchTogether) }
}
