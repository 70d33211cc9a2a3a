package view

// Tracked returns how many intents each per-intent structure of the viewer holds.
func (v *Viewer) Tracked() (subs, lastStatus, looked int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(v.subs), len(v.lastStatus), len(v.looked)
}
