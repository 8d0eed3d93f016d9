package health

import (
	"fmt"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// BenchmarkGate measures one observation and one verdict for an allocation with 20
// checks of each provider, the work the engine does per allocation in flight per change.
func BenchmarkGate(b *testing.B) {
	var specs []CheckSpec
	var nomad, consul []Check
	for i := range 20 {
		name := fmt.Sprintf("c%d", i)
		specs = append(specs,
			CheckSpec{Provider: ProviderNomad, Service: "web", Name: name, OnUpdate: OnUpdateRequireHealthy},
			CheckSpec{Provider: ProviderConsul, Service: "api", Name: name, OnUpdate: OnUpdateIgnoreWarnings})
		nomad = append(nomad, nc(name, NomadSuccess, ModeHealthiness, ""))
		consul = append(consul, cc(name, ConsulWarning, ""))
	}
	g := NewGate(Config{Mode: restart.HealthChecks, Checks: specs, Since: t0, MinHealthy: 10 * time.Second, Deadline: time.Hour})
	g.ObserveAlloc(runningAlloc(map[string]float64{"app": 1, "proxy": 1}))
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		now := t0.Add(time.Duration(i) * time.Millisecond)
		if i%2 == 0 {
			g.ObserveChecks(Snapshot{Provider: ProviderNomad, At: now, Checks: nomad})
		} else {
			g.ObserveChecks(Snapshot{Provider: ProviderConsul, At: now, Checks: consul})
		}
		if v := g.Evaluate(now); v.State == Failed {
			b.Fatalf("verdict %+v", v)
		}
	}
}
