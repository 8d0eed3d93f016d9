package cli

import (
	"errors"
	"flag"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nomad-restart/nomad-restart/internal/fleet"
	"github.com/nomad-restart/nomad-restart/internal/restart"
)

func TestParseRunArgsValid(t *testing.T) {
	cases := []struct {
		name        string
		args        []string
		interactive bool
		check       func(t *testing.T, o *runOptions)
	}{
		{"defaults on a terminal", []string{"web"}, true, func(t *testing.T, o *runOptions) {
			s := o.spec
			if o.job != "web" || len(s.BatchSizes) != 1 || s.BatchSizes[0] != (restart.BatchSize{N: 1}) {
				t.Fatalf("job %q sizes %+v", o.job, s.BatchSizes)
			}
			if s.OnError != restart.OnErrorAsk || s.Health != restart.HealthAuto || s.HealthyDeadline != 5*time.Minute || s.BatchWait != 0 ||
				s.HealthyDeadlineGiven || s.MinHealthyTimeGiven {
				t.Fatalf("spec %+v", s)
			}
			if o.state != stateAuto || o.detach || o.json || o.verbose {
				t.Fatalf("options %+v", o)
			}
		}},
		{"percent batch and wait", []string{"-batch-size", "10%", "-batch-wait=10s", "-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			if o.spec.BatchSizes[0] != (restart.BatchSize{N: 10, Percent: true}) || o.spec.BatchWait != 10*time.Second {
				t.Fatalf("spec %+v", o.spec)
			}
		}},
		{"batch-wait 0 without unit is valid", []string{"-batch-wait=0", "-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			if o.spec.BatchWait != 0 {
				t.Fatalf("wait %v", o.spec.BatchWait)
			}
		}},
		{"repeated groups and tasks collect into sets", []string{"-group=a", "-group", "b", "-group=a", "-task=x", "-task=y", "-task=x", "-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			if strings.Join(o.spec.Groups, ",") != "a,b" || strings.Join(o.spec.Tasks, ",") != "x,y" {
				t.Fatalf("groups %v tasks %v", o.spec.Groups, o.spec.Tasks)
			}
		}},
		{"ask with -yes off a terminal", []string{"-batch-wait=ASK", "-yes", "web"}, false, func(t *testing.T, o *runOptions) {
			if !o.spec.BatchWaitAsk || !o.spec.Yes {
				t.Fatalf("spec %+v", o.spec)
			}
		}},
		{"ask with -detach off a terminal", []string{"-batch-wait=ask", "-detach", "web"}, false, func(t *testing.T, o *runOptions) {
			if !o.spec.BatchWaitAsk || !o.detach || o.spec.OnError != restart.OnErrorAsk {
				t.Fatalf("spec %+v", o.spec)
			}
		}},
		{"our options", []string{"-health=none", "-healthy-deadline=1m", "-min-healthy-time=10s", "-state=local", "-json", "-verbose", "-reschedule", "-no-shutdown-delay", "-yes", "web"}, false, func(t *testing.T, o *runOptions) {
			s := o.spec
			if s.Health != restart.HealthNone || s.HealthyDeadline != time.Minute || s.MinHealthyTime != 10*time.Second || !s.Reschedule || !s.NoShutdownDelay ||
				!s.HealthyDeadlineGiven || !s.MinHealthyTimeGiven {
				t.Fatalf("spec %+v", s)
			}
			if o.state != stateLocal || !o.json || !o.verbose {
				t.Fatalf("options %+v", o)
			}
		}},
		{"consul flags win over the environment", []string{"-health=checks", "-consul-address=http://c:8500", "-consul-token=ct", "-consul-ca-cert=ca.pem",
			"-consul-client-cert=c.pem", "-consul-client-key=k.pem", "-consul-tls-server-name=consul.local", "-consul-tls-skip-verify", "-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			env := map[string]string{"CONSUL_HTTP_ADDR": "http://env:8500", "CONSUL_HTTP_TOKEN": "envtoken", "CONSUL_HTTP_SSL_VERIFY": "true"}
			c := o.client.withEnv(func(k string) string { return env[k] }).consulConfig
			if o.spec.Health != restart.HealthChecks || c.Address != "http://c:8500" || c.Token != "ct" || c.CACert != "ca.pem" || c.ClientCert != "c.pem" ||
				c.ClientKey != "k.pem" || c.TLSServerName != "consul.local" || c.SkipVerify == nil || !*c.SkipVerify {
				t.Fatalf("consul %+v", c)
			}
		}},
		{"consul from the environment", []string{"-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			env := map[string]string{"CONSUL_HTTP_ADDR": "env:8501", "CONSUL_HTTP_SSL": "true", "CONSUL_HTTP_TOKEN": "envtoken", "CONSUL_HTTP_SSL_VERIFY": "false"}
			c := o.client.withEnv(func(k string) string { return env[k] }).consulConfig
			if c.Address != "https://env:8501" || c.Token != "envtoken" || c.SkipVerify == nil || !*c.SkipVerify {
				t.Fatalf("consul %+v", c)
			}
		}},
		{"client flags", []string{"-address=http://x:1", "-region=r", "-namespace=ns", "-token=t", "-tls-skip-verify", "-on-error=fail", "web"}, false, func(t *testing.T, o *runOptions) {
			c := o.client
			if c.address != "http://x:1" || c.region != "r" || c.namespace != "ns" || c.token != "t" || !c.insecure {
				t.Fatalf("client %+v", c)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseRunArgs(tc.args, tc.interactive)
			if err != nil {
				t.Fatalf("parseRunArgs(%q): %v", tc.args, err)
			}
			tc.check(t, o)
		})
	}
}

func TestParseRunArgsHelp(t *testing.T) {
	_, err := parseRunArgs([]string{"-help"}, false)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("err = %v, want flag.ErrHelp", err)
	}
}

// TestParseRunArgsOffATerminal: off a terminal, -on-error defaults to fail and the plan says
// why; "ask" given is refused unless -yes or -detach says who answers, in a dry run as in
// the run it previews.
func TestParseRunArgsOffATerminal(t *testing.T) {
	cases := []struct {
		args    []string
		onError restart.OnError
		noted   bool
		refused string // "" when accepted
	}{
		{[]string{"web"}, restart.OnErrorFail, true, ""},
		{[]string{"-dry-run", "web"}, restart.OnErrorFail, true, ""},
		{[]string{"-dry-run", "-json", "web"}, restart.OnErrorFail, true, ""},
		{[]string{"-on-error=fail", "web"}, restart.OnErrorFail, false, ""},
		{[]string{"-yes", "web"}, restart.OnErrorAsk, false, ""},
		{[]string{"-detach", "web"}, restart.OnErrorAsk, false, ""},
		{[]string{"-dry-run", "-detach", "-batch-wait=ask", "web"}, restart.OnErrorAsk, false, ""},
		{[]string{"-on-error=ask", "web"}, "", false, `Invalid -on-error value "ask"`},
		{[]string{"-dry-run", "-batch-wait=ask", "web"}, "", false, `Invalid -batch-wait value "ask"`},
		{[]string{"-json", "-on-error=fail", "-batch-wait=ask", "web"}, "", false, `Invalid -batch-wait value "ask"`},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			o, err := parseRunArgs(tc.args, false)
			switch {
			case tc.refused == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused)):
				t.Fatalf("err = %v, want %q", err, tc.refused)
			case tc.refused != "":
				return
			case o.spec.OnError != tc.onError:
				t.Fatalf("on-error=%s, want %s", o.spec.OnError, tc.onError)
			case (len(o.notes) > 0) != tc.noted:
				t.Fatalf("notes %q, want a note: %v", o.notes, tc.noted)
			}
		})
	}
	// At a terminal, the default stays Nomad's: ask.
	if o, err := parseRunArgs([]string{"web"}, true); err != nil || o.spec.OnError != restart.OnErrorAsk || len(o.notes) > 0 {
		t.Fatalf("at a terminal: %v %+v", err, o)
	}
}

func TestParseRunArgsFleet(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want fleet.Options
	}{
		{"defaults", []string{"-jobs", `Type == "service"`, "-on-error=fail"},
			fleet.Options{MaxParallelJobs: 1, MaxFailedJobs: 0, Order: fleet.OrderName, Busy: fleet.BusyWait, OnError: restart.OnErrorFail, AfterOutside: fleet.AfterOutsideWait}},
		{"every option", []string{"-jobs", `Type == "service"`, "-max-parallel-jobs", "5", "-max-failed-jobs=2", "-order=priority", "-busy", "skip", "-detach",
			"-after", "web: api, auth", "-after=api: db/db-proxy", "-after-outside", "ignore", "-wave-wait", "30s"},
			fleet.Options{MaxParallelJobs: 5, MaxFailedJobs: 2, Order: fleet.OrderPriority, Busy: fleet.BusySkip, OnError: restart.OnErrorAsk,
				After:        []fleet.Dependency{{Job: "web", Upstreams: []string{"api", "auth"}}, {Job: "api", Upstreams: []string{"db/db-proxy"}}},
				AfterOutside: fleet.AfterOutsideIgnore, WaveWait: 30 * time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o, err := parseRunArgs(tc.args, false)
			if err != nil {
				t.Fatal(err)
			}
			if !o.fleet.selected() || o.job != "" || !reflect.DeepEqual(o.fleet.opts, tc.want) {
				t.Errorf("fleet %+v, job %q; want options %+v", o.fleet, o.job, tc.want)
			}
			if o.spec.OnError != tc.want.OnError {
				t.Errorf("the children's -on-error %q, want the fleet's %q", o.spec.OnError, tc.want.OnError)
			}
		})
	}
	for args, want := range map[string]string{
		"-after=web":           `Invalid -after value "web": give "<job>: <upstream>[, <upstream>...]"`,
		"-after=web: a b":      `Invalid -after value "web: a b": "a b" is not a job name`,
		"-after-outside=maybe": `Invalid -after-outside value "maybe": valid options are "wait" and "ignore"`,
		"-wave-wait=5":         `Invalid -wave-wait value "5": give a duration with a unit`,
		"-wave-wait=-1s":       `Invalid -wave-wait value "-1s"`,
	} {
		_, err := parseRunArgs([]string{"-jobs", "x", args}, false)
		if err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
	if _, err := parseRunArgs([]string{"-after", "web: api", "web"}, false); err == nil || !strings.Contains(err.Error(), "-after applies to fleet restarts only") {
		t.Errorf("-after without -jobs: %v", err)
	}
	if o, err := parseRunArgs([]string{"-on-error=fail", "web"}, false); err != nil || o.fleet.selected() || o.job != "web" {
		t.Errorf("a run of one job: %+v, %v", o, err)
	}
}
