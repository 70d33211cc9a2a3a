package wire

// The registered schema ids of SPEC section 13. store/schema holds their definitions.
const (
	SchemaMediaIntent    = "keeppeek.media-intent.v1"
	SchemaLease          = "keeppeek.lease.v1"
	SchemaObservedStatus = "keeppeek.observed-status.v1"
	SchemaPreference     = "keeppeek.preference.v1"
	SchemaWorkerStatus   = "keeppeek.worker-status.v1"
)
