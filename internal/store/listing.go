package store

// The restarts a store keeps, as a discovery's listing names them: what an agent looking
// for restarts no one drives reads before it reads any record (the Nomad store's lister
// answers with these).

// ListedRestart is a restart as one listing shows it.
type ListedRestart struct {
	Namespace, ID string
	// JobSegment is the record's job path segment: the job ID escaped with
	// nomadvars.EscapeSegment, shortened when long.
	JobSegment string
	// HeadIndex is the record's head's ModifyIndex; LeaseIndex the lease variable's, 0 when
	// it has none. A change of either is a reason to look at the restart again.
	HeadIndex, LeaseIndex uint64
}

// RestartListing is the answer of one listing.
type RestartListing struct {
	// Restarts are in the order the listing named them; a lease whose record is gone is
	// left out (nothing to drive).
	Restarts []ListedRestart
	// Index is the listing's index: the after of the List that waits for the next change.
	Index uint64
}
