package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
)

// printComparison shows the two restarts' figures side by side.
func printComparison(w io.Writer, r *demoResult) {
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
	fmt.Fprint(w, demoBalancerNote)
}

// demoBalancerNote says what the requests' figures measure, and why nomad-restart's are
// not zero: the sample service is of Nomad's provider.
const demoBalancerNote = `
The load balancer read the instances from Nomad's service catalog every second and sent them
steady traffic, round-robin. That catalog has no health: the balancer keeps sending to a
restarting instance until its next read, and lists it again as soon as its task runs, before
it has warmed up. So nomad-restart's health gate makes fewer requests fail, not none.
Behind Consul's passing instances, with a shutdown_delay longer than the balancer's refresh,
nomad-restart loses none (docs/benchmarks.md, issue 21).
`

// failedOf shows the requests that failed during a restart: "412 of 1,020 (40%)".
func failedOf(f servingFigures) string {
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

// demoLookHint says how to look at the restarts: where the demo keeps its cluster up (with
// -http-addr), the command and the page; otherwise how to keep it up.
func demoLookHint(r *demoResult, nomadAddr, pageURL string, verbose bool) string {
	id, nid := shortID(r.NomadRestart.RestartID, verbose), shortID(r.Nomad.RestartID, verbose)
	var b strings.Builder
	fmt.Fprintf(&b, "\nRestart %s is nomad-restart's (%s is the one done as Nomad does); both are recorded in the\n", id, nid)
	b.WriteString("simulated cluster's Nomad Variables, as on a real cluster.\n")
	if pageURL == "" {
		fmt.Fprintf(&b, "The simulated cluster ends with the demo: keep it up with `nomad-restart demo -http-addr 127.0.0.1:9646`\n")
		fmt.Fprintf(&b, "to look at them with `nomad-restart status %s` and on the agent's page.\n", id)
		return b.String()
	}
	fmt.Fprintf(&b, "The simulated cluster stays up until Ctrl-C. Look at them:\n")
	fmt.Fprintf(&b, "    NOMAD_ADDR=%s nomad-restart status %s\n", nomadAddr, id)
	fmt.Fprintf(&b, "    %s    (the agent's page)\n", pageURL)
	return b.String()
}
