import BrokerSupport
import Foundation
import GroupSync
import MQTT

/// The activity of the demo: a photo gallery the group flips through together.
struct GalleryActivity: GroupActivity {
    static let activityIdentifier = "com.example.gallery"
    var galleryID: String
    var metadata: GroupActivityMetadata { .init(title: "Gallery \(galleryID)", type: .exploreTogether) }
}
