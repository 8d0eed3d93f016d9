package demo

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// PrintComparison shows the two restarts' figures side by side.
func PrintComparison(w io.Writer, r *Result) {
	n, g := r.Nomad, r.NomadRestart
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 4, ' ', 0)
	fmt.Fprintln(tw, "\tnomad job restart\tnomad-restart")
	fmt.Fprintf(tw, "Fewest instances serving\t%d of %d\t%d of %d\n", n.MinServing, r.Count, g.MinServing, r.Count)
	fmt.Fprintf(tw, "Time with none serving\t%s\t%s\n", sharePercent(n.NoneServingShare), sharePercent(g.NoneServingShare))
	fmt.Fprintf(tw, "Requests failed through a load balancer\t%s\t%s\n", failedOf(n), failedOf(g))
	fmt.Fprintf(tw, "Restart ended after\t%.1fs\t%.1fs\n", n.RestartSeconds, g.RestartSeconds)
	fmt.Fprintf(tw, "All %d serving again after\t%.1fs\t%.1fs\n", r.Count, n.Seconds, g.Seconds)
	_ = tw.Flush()
	fmt.Fprint(w, balancerNote)
}

// balancerNote says what the requests' figures measure, and why nomad-restart's are zero.
const balancerNote = `
The load balancer read the passing instances from Consul every 5s, as Traefik's Consul Catalog
provider does when so configured, and sent them steady traffic, round-robin. Restarted as
Nomad does, an instance stops while the balancer still sends to it, until its next read.
nomad-restart first drained each instance out of Consul's passing answers until the
balancer's API no longer listed it, and restarted the next only once the last passed its
check: no request failed. Behind Nomad's own service provider, whose catalog has no health,
its side still loses about 1 request in 10 (docs/requests.md).
`

// failedOf shows the requests that failed during a restart: "412 of 1,020 (40%)".
func failedOf(f Figures) string {
	share := 0.0
	if f.Requests > 0 {
		share = float64(f.FailedRequests) / float64(f.Requests)
	}
	return fmt.Sprintf("%s of %s (%s)", thousands(f.FailedRequests), thousands(f.Requests), sharePercent(share))
}

// thousands writes a count, n >= 0, with a comma between groups of three digits: 1,020.
func thousands(n int) string {
	s := strconv.Itoa(n)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// sharePercent shows a share of time as a percentage, never rounding a real outage to 0%.
func sharePercent(share float64) string {
	pct := share * 100
	if share > 0 && pct < 1 {
		return "<1%"
	}
	return fmt.Sprintf("%.0f%%", pct)
}
