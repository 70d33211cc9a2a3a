// Package lease gives workers exclusive, expiring claims on keys of the state store (SPEC sections 4
// to 7): TTL leases, renewal, release, standby and leader election, built on store/client alone.
//
// Claim creates a keeppeek.lease.v1 entry with a TTL, create-only (expected_revision 0), so of many
// claimants exactly one wins; the others get ErrHeld. The winner's Lease renews the entry with
// compare-and-set puts every Options.RenewEvery, each renewal giving it a new revision. Held tells a
// job whether the lease is still known to be valid (it turns false a safety margin before the store
// could expire the entry), Lost is closed when it is not, and Release stops the renewals and deletes
// the entry so that a standby can take over at once.
//
// The lease's current revision is a fencing token. Lease.Put and Lease.Delete send it as the guard of
// their write, and the store commits the write only while the lease entry is still at that revision:
// a worker that lost its lease, however late it wakes up, cannot write on its behalf. Held and the
// local refusal (ErrNotHeld) are the early answer; the guard is the protection. A revision means
// something only in the store's epoch (SPEC section 4): a restore starts a new one, where another
// claim may reach the same number, so renewals, guarded writes and Release first ask the store's epoch,
// and a lease claimed in another epoch is lost (ErrRestored) without a write. Its holder learns that
// only at its next renewal, and the restored store may not hold its entry at all (claimed after the
// backup), so a claim made within a TTL of its client first seeing the new epoch is refused
// (RestoreWaitError, ErrHeld) for the rest of that TTL, which Campaign waits out (see
// client.Client.SinceEpochChange): by then every former holder has let go, renewing or not, as a dead
// holder's entry has expired when a standby takes over. This assumes the key's holders
// use one TTL, and a client that first connects after the restore cannot tell.
//
// Campaign is the standby: it claims, and while the lease is held it watches the key and claims again
// as soon as the entry is deleted or expires, without reading it again and again (it only checks,
// every RenewEvery, that its watch is still live). Elector runs a singleton job on one replica at a
// time: it campaigns, calls OnStarted with a context cancelled when the lease is lost,
// releases, and campaigns again. The leader keeps a resume offset with Lease.LoadOffset and
// Lease.SaveOffset; the save is a guarded write, so a deposed leader cannot move the offset.
// Elector.Collector shows, to Prometheus, whether the replica leads, its terms and its fencing token.
//
// Only admin principals write service namespaces, so leases are claimed with an admin principal's
// client.
//
// Clocks: leases rely on the local clock's rate matching the store's, not on their readings. The
// holder times its lease on its own clock from the send of each claim or renewal, never from the
// entry's expires_at_ms (a time of the store's clock, which may be minutes off this host's), and a
// standby waits for the store's DELETE or EXPIRE, never for a time; claimed_at_ms and renewed_at_ms in
// the document are the holder's clock and tell nothing of how long the lease has to run. The holder's
// clock counts a suspend of its machine (on Linux it is CLOCK_BOOTTIME; Go's monotonic clock stands
// still through a suspend): a holder resumed after sleeping past its lease's validity finds Held false
// and Guard void at once, and its renewal loop ends the lease (ErrLost), closing Lost and cancelling
// Context and an Elector's job, when it next wakes, within RenewEvery/8 (it never sleeps longer, since
// Go's timers stand still through the suspend), instead of renewing. The store times deadlines the
// same way (the wall clock read when it opened, advanced by its CLOCK_BOOTTIME), so a step of the
// state server's wall clock (an NTP step, an operator's date) expires no lease early, whether it ran
// or was stopped then (its next start on the same boot moves the deadlines with the step). What the
// safety margin cannot cover is such a step across a reboot of the state server's machine, where only
// the wall clock tells the time between: a lease whose deadline the step passed is expired at that
// start, and Held, and an Elector's job, may go on until the holder's next renewal (due within
// RenewEvery) is refused. The store's guard still refuses every write of the former holder (Put,
// Delete, SaveOffset); work it does outside the store is not fenced.
package lease
