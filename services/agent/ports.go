package agent

import (
	"fmt"
	"sync"
)

// portPool hands out ports from a range, skipping ports in use on the machine.
type portPool struct {
	mu       sync.Mutex
	min, max int
	next     int
	used     map[int]bool
}

func newPortPool(min, max int) *portPool {
	return &portPool{min: min, max: max, next: min, used: map[int]bool{}}
}

// take returns n free ports.
func (p *portPool) take(host string, n int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []int
	for tries := 0; len(out) < n && tries <= p.max-p.min; tries++ {
		port := p.next
		p.next++
		if p.next > p.max {
			p.next = p.min
		}
		if p.used[port] || !freePort(host, port) {
			continue
		}
		p.used[port] = true
		out = append(out, port)
	}
	if len(out) < n {
		for _, port := range out {
			delete(p.used, port)
		}
		return nil, fmt.Errorf("agent: no %d free ports in %d-%d", n, p.min, p.max)
	}
	return out, nil
}

// release returns ports to the pool.
func (p *portPool) release(ports []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, port := range ports {
		delete(p.used, port)
	}
}
