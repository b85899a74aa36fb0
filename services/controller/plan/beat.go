package plan

import "time"

// Beat is a host's last heartbeat, as the planner reads it.
type Beat struct {
	// Stored is when the heartbeat bucket stored the beat, by the NATS
	// server's clock; zero if unknown.
	Stored time.Time
	// Report reads what the agent wrote in the beat; nil for a beat that
	// says nothing. It is called only where a rule needs it: most passes
	// look at no host's inventory, and decoding every host's for each
	// pass would cost more than the pass.
	Report func() Report
}

// Report is what an agent wrote in a heartbeat.
type Report struct {
	// Written is when the agent wrote the beat, by its clock; zero when
	// the beat had no time.
	Written time.Time
	// Inventory is what the agent supervised then; nil when the beat has
	// none (an older agent's bare timestamp, or a value that could not be
	// decoded).
	Inventory *Inventory
}

// Inventory is the game servers an agent supervises when it beats.
type Inventory struct {
	// Servers are the names of the game servers the agent supervises,
	// whether or not their process runs at this instant.
	Servers []string
	// Queued counts the agent's events not yet in the stream (its
	// outbox). The inventory accounts for every server that left it only
	// when this is 0: a server's final events are in the stream before it
	// leaves the inventory, or still queued.
	Queued int
}

// Has reports whether the inventory lists a game server.
func (inv *Inventory) Has(name string) bool {
	for _, s := range inv.Servers {
		if s == name {
			return true
		}
	}
	return false
}

// report is what the beat says, if anything.
func (b Beat) report() Report {
	if b.Report == nil {
		return Report{}
	}
	return b.Report()
}

// WrittenAt is when the agent wrote the beat, by its clock; zero when
// unknown.
func (b Beat) WrittenAt() time.Time { return b.report().Written }

// Inv is the beat's inventory; nil when it has none.
func (b Beat) Inv() *Inventory { return b.report().Inventory }
