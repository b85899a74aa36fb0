package chaos

import "testing"

// With an Agones game server, each kind of server (steady, flapping) is
// split in half between Tether's SDK and Agones', the servers add up, and
// only the Agones fleets run the Agones binary.
func TestChaosFleetsHalfOnAgones(t *testing.T) {
	for _, servers := range []int{200, 41, 4} {
		fleets := chaosFleets(Options{Servers: servers, GameServer: "tether", AgonesGameServer: "agones"})
		total, agones, flapping := 0, 0, 0
		for _, f := range fleets {
			total += f.n
			if f.agones {
				agones += f.n
			}
			if f.flapping {
				flapping += f.n
			}
			if want := map[bool]string{true: "agones", false: "tether"}[f.agones]; f.bin != want {
				t.Errorf("%d servers: fleet %s runs %s, want %s", servers, f.id, f.bin, want)
			}
		}
		if total != servers || flapping != servers/4 || agones < servers/2-1 || agones > servers/2 {
			t.Errorf("%d servers: %d in the fleets, %d flapping, %d on Agones' SDK", servers, total, flapping, agones)
		}
	}
	if fleets := chaosFleets(Options{Servers: 200, GameServer: "tether"}); len(fleets) != 2 || fleets[0].agones || fleets[1].agones {
		t.Errorf("without an Agones game server: %+v", fleets)
	}
}
