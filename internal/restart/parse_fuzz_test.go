package restart

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fuzztest"
)

// checkRefusal checks a parser's refusal of s: a *ValueError of flag, whose value is s or,
// for a list, the part of s at fault (never empty when s has a part to name), read in one
// line that names the flag and the value.
func checkRefusal(t *testing.T, flag, s string, err error) {
	t.Helper()
	what := "-" + flag + " " + strconv.Quote(s)
	var ve *ValueError
	if !errors.As(err, &ve) {
		t.Errorf("%s: error %v (%T), want a *ValueError", what, err, err)
		return
	}
	if ve.Flag != flag || ve.Reason == "" {
		t.Errorf("%s: %#v, want the flag %q and a reason", what, ve, flag)
	}
	if !strings.Contains(s, ve.Value) || (ve.Value == "" && strings.TrimSpace(s) != "") {
		t.Errorf("%s: the error names the value %q, which is not the input or a part of it", what, ve.Value)
	}
	fuzztest.Names(t, what, err, "-"+flag, ve.Value)
	fuzztest.OneLine(t, what, err)
}

// FuzzFlagParsers feeds one value to every option parser that `run`'s flags and a job's
// nomad-restart.* meta share: none panics or hangs, each refusal names the flag and the
// value, and each accepted value is one the rules can use (sizes above zero, durations in
// their range, batch sizes that read back as written and plan every allocation).
func FuzzFlagParsers(f *testing.F) {
	for _, s := range []string{
		// The tests' values: parse_test.go, budget_test.go, batch_test.go.
		"1", "3", "50%", "100%", "200%", "1%", "10%", "1,10%,25%", "2,1", "1,0", "0", "0%", "101%", "-1", "x", "",
		" 3 ", "25%", "10", "-1s", "0s", "Ask", "ask", "Fail", "fail", "healthy", " NONE ", "checks", "running", "auto",
		"1m", "5m", "2s", "auto ", "5m1s", "1h",
		// Shapes a fuzzer takes long to find: empty parts, huge numbers, units.
		"1,,2", "1,", ",", "9223372036854775807%", "92233720368547758%", "9223372036854775808", "1e3", "0x10", "1_000",
		"+1", "１", "1%%", "10s ", "1.5h", "-0s", "9223372036s",
		// -drain-until and -balancer-refresh: balancer_test.go's.
		"traefik=http://traefik:8080", "haproxy=http://127.0.0.1:8404/stats", "haproxy=unix:/run/haproxy/admin.sock",
		"haproxy=tcp://127.0.0.1:9999", "envoy=http://127.0.0.1:19000", `prometheus:sum(rate(req{instance="{{address}}"}[15s])) == 0`,
		"prometheus:", "prometheus:{{nope}}", "prometheus:up{{", "traefik=", "traefik=ftp://x", "traefik=http://", "nginx=http://x",
		"haproxy=unix:relative", "haproxy=tcp://nohost", "traefik=5s", "fabio=0s", "traefik=6m", "traefik=-1s", "=1s",
	} {
		f.Add(s, int64(DefaultHealthyDeadline))
	}
	f.Fuzz(func(t *testing.T, s string, deadline int64) {
		fuzztest.Bound(t, "the option parsers", func() { checkFlagParsers(t, s, time.Duration(deadline)) })
	})
}

func checkFlagParsers(t *testing.T, s string, deadline time.Duration) {
	if sizes, err := ParseBatchSizes(s); err != nil {
		checkRefusal(t, "batch-size", s, err)
	} else {
		if len(sizes) == 0 {
			t.Errorf("ParseBatchSizes(%q) accepted no size", s)
		}
		for _, b := range sizes {
			if b.N <= 0 {
				t.Errorf("ParseBatchSizes(%q) accepted the size %+v", s, b)
			}
		}
		if again, err := ParseBatchSizes(FormatBatchSizes(sizes)); err != nil || !reflect.DeepEqual(again, sizes) {
			t.Errorf("ParseBatchSizes(%q) = %+v, which reads back (%q) as %+v, %v", s, sizes, FormatBatchSizes(sizes), again, err)
		}
		for _, n := range []int{0, 1, 7, 100, 1000} {
			checkBatchPlan(t, s, sizes, n)
		}
	}

	if d, ask, err := ParseBatchWait(s); err != nil {
		checkRefusal(t, "batch-wait", s, err)
	} else if d < 0 || (ask && d != 0) || ask != strings.EqualFold(s, "ask") {
		t.Errorf("ParseBatchWait(%q) = %s, %v", s, d, ask)
	}

	if o, err := ParseOnError(s); err != nil {
		checkRefusal(t, "on-error", s, err)
	} else if o != OnErrorAsk && o != OnErrorFail {
		t.Errorf("ParseOnError(%q) = %q", s, o)
	}

	if h, err := ParseHealthMode(s); err != nil {
		checkRefusal(t, "health", s, err)
	} else if h != HealthAuto && h != HealthChecks && h != HealthNone && h != HealthRunning {
		t.Errorf("ParseHealthMode(%q) = %q", s, h)
	}

	if d, err := ParseHealthyDeadline(s); err != nil {
		checkRefusal(t, "healthy-deadline", s, err)
	} else if d <= 0 {
		t.Errorf("ParseHealthyDeadline(%q) = %s", s, d)
	}

	if d, err := ParseMinHealthyTime(s, deadline); err != nil {
		checkRefusal(t, "min-healthy-time", s, err)
	} else if d < 0 || d >= deadline {
		t.Errorf("ParseMinHealthyTime(%q, %s) = %s", s, deadline, d)
	}

	if b, err := ParseMaxUnavailable(s); err != nil {
		checkRefusal(t, "max-unavailable", s, err)
	} else if b.N <= 0 || (b.Percent && b.N > 100) {
		t.Errorf("ParseMaxUnavailable(%q) = %+v", s, b)
	} else {
		for _, n := range []int{0, 1, 7, 1000} {
			if k := b.Of(n); k < 1 || (n > 0 && b.Percent && k > n) {
				t.Errorf("ParseMaxUnavailable(%q) = %+v, of %d allocations: %d", s, b, n, k)
			}
		}
	}

	if n, err := ParseSurge(s); err != nil {
		checkRefusal(t, "surge", s, err)
	} else if n < 1 {
		t.Errorf("ParseSurge(%q) = %d", s, n)
	}

	if ev, err := ParseDrainUntil(s); err != nil {
		checkRefusal(t, "drain-until", s, err)
	} else if again, err := ParseDrainUntil(ev.String()); err != nil || again != ev {
		t.Errorf("ParseDrainUntil(%q) = %+v, which reads back (%q) as %+v, %v", s, ev, ev.String(), again, err)
	} else if ev.Kind == EvidencePrometheus && strings.Contains(ev.QueryFor(DrainTarget{Address: "10.0.0.1:80"}), "{{") {
		t.Errorf("ParseDrainUntil(%q) accepted a query whose variables are not all filled in: %q", s, ev.QueryFor(DrainTarget{}))
	}

	if key, d, err := ParseBalancerRefresh(s); err != nil {
		checkRefusal(t, "balancer-refresh", s, err)
	} else if d < 0 || d > MaxDrain || (key != BalancerTraefik && key != BalancerFabio) {
		t.Errorf("ParseBalancerRefresh(%q) = %q, %s", s, key, d)
	}

	if d, given, err := ParseDrain(s); err != nil {
		checkRefusal(t, "drain", s, err)
	} else if d < 0 || d > MaxDrain || given == (strings.TrimSpace(s) == DrainAuto) || (!given && d != 0) {
		t.Errorf("ParseDrain(%q) = %s, %v", s, d, given)
	}
}

// checkBatchPlan checks the plan of accepted sizes for n allocations: every allocation in
// one batch, every batch of one or more, each size as asked (a percentage of n rounded up,
// 100% and more all at once) until the allocations run out.
func checkBatchPlan(t *testing.T, s string, sizes []BatchSize, n int) {
	plan := BatchPlan(sizes, n)
	total := 0
	for i, k := range plan {
		b := sizes[min(i, len(sizes)-1)]
		want := b.N
		if b.Percent {
			want = n
			if b.N < 100 {
				want = max((n*b.N+99)/100, 1)
			}
		}
		if k < 1 || (k != want && (k > want || i != len(plan)-1)) {
			t.Errorf("-batch-size %q for %d allocations: plan %v, whose batch %d should be %d", s, n, plan[:min(len(plan), 10)], i+1, want)
			return
		}
		total += k
	}
	if total != n {
		t.Errorf("-batch-size %q for %d allocations: %d batches restart %d", s, n, len(plan), total)
	}
}

// FuzzParseAnswer answers each kind of question with any text: y/yes and n/no (any case,
// any surrounding space) are read as such, a duration only where the question offers one,
// an empty answer takes the default, and anything else is ErrInvalidAnswer naming the text.
func FuzzParseAnswer(f *testing.F) {
	for _, a := range []string{"", "y", "yes", "n", "no", "Y", " YES ", "10s", "-1s", "0s", "maybe", "1h30m", "y\n", "yess", "ask"} {
		f.Add(a, false, false, false, false)
		f.Add(a, true, false, false, true)
		f.Add(a, false, false, false, true)
		f.Add(a, true, true, true, true)
	}
	f.Fuzz(func(t *testing.T, text string, errs, unrecoverable, last, askOn bool) {
		q := NewQuestion("q1", 2, errs, unrecoverable, last, askOn, time.Time{})
		fuzztest.Bound(t, "ParseAnswer", func() {
			a, err := ParseAnswer(q, text)
			word := strings.ToLower(strings.TrimSpace(text))
			if word == "" && err == nil {
				t.Errorf("ParseAnswer(%q) took an empty answer: only a prompt's Enter (AtPrompt) takes the default", text)
			}
			takesWait := strings.Contains(q.Options, "<wait duration>")
			switch {
			case err != nil:
				if !errors.Is(err, ErrInvalidAnswer) {
					t.Errorf("ParseAnswer(%q): %v, want ErrInvalidAnswer", text, err)
				}
				fuzztest.Names(t, "answer "+strconv.Quote(text), err, text)
				fuzztest.OneLine(t, "answer "+strconv.Quote(text), err)
				if word == "y" || word == "yes" || word == "n" || word == "no" {
					t.Errorf("ParseAnswer(%q) refused a yes or no: %v", text, err)
				}
			case a.Wait != nil:
				if !takesWait || *a.Wait < 0 || !a.Proceed {
					t.Errorf("ParseAnswer(%q) to %q = wait %s, proceed %v", text, q.Options, *a.Wait, a.Proceed)
				}
			case a.Proceed != (word == "y" || word == "yes"):
				t.Errorf("ParseAnswer(%q) = proceed %v", text, a.Proceed)
			case !a.Proceed && word != "n" && word != "no":
				t.Errorf("ParseAnswer(%q) took %q for no", text, word)
			}
		})
	})
}
