package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
	"github.com/nomad-restart/nomad-restart/internal/simtest"
	"github.com/nomad-restart/nomad-restart/nomadsim"
)

// TestHolderTellsAgentsOfOneNodeApart checks that two agents run by Nomad on one node
// (one hostname, each maybe pid 1 in its own namespace) get different holders.
func TestHolderTellsAgentsOfOneNodeApart(t *testing.T) {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	plain := fmt.Sprintf("%s:%d", host, os.Getpid())
	tests := []struct {
		alloc string
		want  string
	}{
		{"", plain},
		{"5f3c8a9e-0d1b-4c2a-9e8f-7a6b5c4d3e2f", plain + "/5f3c8a9e"},
		{"abc", plain + "/abc"},
	}
	for _, tt := range tests {
		env := func(k string) string {
			if k == "NOMAD_ALLOC_ID" {
				return tt.alloc
			}
			return ""
		}
		a := newApp(strings.NewReader(""), io.Discard, io.Discard, env)
		if got := a.holder(); got != tt.want {
			t.Errorf("holder with NOMAD_ALLOC_ID %q = %q, want %q", tt.alloc, got, tt.want)
		}
	}
}

// TestBadInput runs every kind of wrong command line against a simulated cluster and checks
// that each gives exit 1, exactly one line on stderr naming the problem (and the fix), and
// no mutating request to Nomad.
func TestBadInput(t *testing.T) {
	c := simtest.Start(t, nomadsim.Options{})
	register(t, c, testJob("web", api.JobTypeService))
	register(t, c, simpleJob("api-a", api.JobTypeService, 1))
	register(t, c, simpleJob("api-b", api.JobTypeService, 1))
	register(t, c, simpleJob("sb", api.JobTypeSysbatch, 1))
	register(t, c, checkedJob("checked", 2, "pass", time.Second, time.Minute))
	scaled := simpleJob("scaled", api.JobTypeService, 1)
	scaled.TaskGroups[0].Scaling = &api.ScalingPolicy{Min: new(int64(1)), Max: new(int64(3)), Policy: map[string]any{}}
	register(t, c, scaled)
	register(t, c, simpleJob("batchy", api.JobTypeBatch, 1))
	e := newCLIEnv(t, c)
	ctx := testCtx(t)

	// Restarts in the local store for the ID cases: one detached (pending) restart of
	// api-a, one ended, and two whose IDs share a prefix.
	code, out, errOut := e.run(ctx, "run", "-detach", "-state=local", "api-a")
	if code != 0 {
		t.Fatalf("setup run -detach: %d\n%s\n%s", code, out, errOut)
	}
	local := e.localStore(t)
	pending := e.localRecords(t, ctx, "api-a")
	if len(pending) != 1 {
		t.Fatalf("setup: %d", len(pending))
	}
	pendingID := pending[0].ID
	for _, id := range []string{"abcd1111-0000-4000-8000-000000000001", "abcd2222-0000-4000-8000-000000000002", "ee000000-0000-4000-8000-000000000003"} {
		rec := &restart.Record{ID: id, Namespace: "default", JobID: "job-" + id[:4] + id[4:8], Status: restart.StatusPending, CreateTime: time.Now()}
		if err := local.Create(ctx, rec); err != nil {
			t.Fatalf("setup record %s: %v", id, err)
		}
		if id[:2] == "ee" {
			rec.Status = restart.StatusSucceeded
			if err := local.Update(ctx, rec); err != nil {
				t.Fatal(err)
			}
		}
	}

	acl := simtest.Start(t, nomadsim.Options{ACLs: true})
	register(t, acl, simpleJob("secure", api.JobTypeService, 1))
	readOnly, err := acl.CreateToken("reader", map[string]string{"reader": `namespace "default" { capabilities = ["read-job"] }`})
	if err != nil {
		t.Fatal(err)
	}
	operator, err := acl.CreateToken("operator", map[string]string{"operator": `namespace "default" { capabilities = ["read-job", "alloc-lifecycle"] }`})
	if err != nil {
		t.Fatal(err)
	}
	aclEnv := newCLIEnv(t, acl)
	roEnv := aclEnv
	roEnv.token = readOnly
	opEnv := aclEnv
	opEnv.token = operator

	badTimeoutEnv := e
	badTimeoutEnv.env = map[string]string{"NOMAD_RESTART_REQUEST_TIMEOUT": "soon"}

	local1 := []string{"-state=local"}
	future := time.Now().Add(48 * time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		name string
		env  *cliEnv
		args []string
		want string // a part of the one stderr line
	}{
		{"no command", nil, []string{}, "Usage"},
		{"unknown command", nil, []string{"restart-all"}, `unknown command "restart-all"`},
		{"run without job", nil, []string{"run", "-on-error=fail"}, "missing job"},
		{"run with two jobs", nil, []string{"run", "-on-error=fail", "web", "api-a"}, "too many arguments"},
		{"unknown flag", nil, []string{"run", "-bogus", "web"}, "unknown option -bogus"},
		{"flag without value", nil, []string{"run", "-on-error=fail", "web", "-batch-size"}, "too many arguments"},
		{"trailing flag without value", nil, []string{"run", "-batch-size"}, "needs a value"},
		{"invalid boolean", nil, []string{"run", "-yes=maybe", "web"}, "invalid boolean value"},
		{"batch-size 0", nil, []string{"run", "-on-error=fail", "-batch-size=0", "web"}, "greater than zero"},
		{"batch-size 0%", nil, []string{"run", "-on-error=fail", "-batch-size=0%", "web"}, "greater than zero"},
		{"batch-size 1.5", nil, []string{"run", "-on-error=fail", "-batch-size=1.5", "web"}, `Invalid -batch-size value "1.5"`},
		{"batch-size 1.5%", nil, []string{"run", "-on-error=fail", "-batch-size=1.5%", "web"}, `Invalid -batch-size value "1.5%"`},
		{"batch-size 15%10%", nil, []string{"run", "-on-error=fail", "-batch-size=15%10%", "web"}, `Invalid -batch-size value "15%10%"`},
		{"batch-size not-valid", nil, []string{"run", "-on-error=fail", "-batch-size=not-valid", "web"}, "Invalid -batch-size"},
		{"batch-size empty", nil, []string{"run", "-on-error=fail", "-batch-size=", "web"}, "Invalid -batch-size"},
		{"batch-wait without unit", nil, []string{"run", "-on-error=fail", "-batch-wait=10", "web"}, `Invalid -batch-wait value "10"`},
		{"batch-wait negative", nil, []string{"run", "-on-error=fail", "-batch-wait=-5s", "web"}, "must not be negative"},
		{"batch-wait ask without terminal", nil, []string{"run", "-on-error=fail", "-batch-wait=ask", "web"}, `"ask" needs an interactive terminal`},
		{"on-error ask without terminal", nil, []string{"run", "-on-error=ask", "web"}, `Invalid -on-error value "ask"`},
		{"on-error invalid", nil, []string{"run", "-on-error=invalid", "web"}, `valid options are "ask" and "fail"`},
		{"on-error is case-sensitive", nil, []string{"run", "-on-error=FAIL", "web"}, `Invalid -on-error value "FAIL"`},
		{"task with all-tasks", nil, []string{"run", "-on-error=fail", "-task=main", "-all-tasks", "web"}, "-all-tasks option cannot be used with -task"},
		{"task with reschedule", nil, []string{"run", "-on-error=fail", "-task=main", "-reschedule", "web"}, "-reschedule option cannot be used with -task"},
		{"empty group", nil, []string{"run", "-on-error=fail", "-group=", "web"}, "must not be empty"},
		{"bad state", nil, []string{"run", "-on-error=fail", "-state=disk", "web"}, `Invalid -state value "disk"`},
		{"bad health", nil, []string{"run", "-on-error=fail", "-health=healthy", "web"}, `Invalid -health value "healthy"`},
		{"unknown balancer", nil, []string{"run", "-on-error=fail", "-drain-until=nginx=http://lb:80", "web"}, `Invalid -drain-until value "nginx=http://lb:80": unknown balancer; give traefik=http://HOST:8080`},
		{"balancer refresh of no balancer", nil, []string{"run", "-on-error=fail", "-balancer-refresh=nginx=5s", "web"}, `Invalid -balancer-refresh value "nginx=5s": give NAME=DURATION`},
		{"agent's unknown balancer", nil, []string{"agent", "-drain-until=traefik=lb:8080"}, `Invalid -drain-until value "traefik=lb:8080": give the URL of traefik's API`},
		{"zero healthy-deadline", nil, []string{"run", "-on-error=fail", "-healthy-deadline=0s", "web"}, "Invalid -healthy-deadline"},
		{"bad healthy-deadline", nil, []string{"run", "-on-error=fail", "-healthy-deadline=soon", "web"}, "Invalid -healthy-deadline"},
		{"negative min-healthy-time", nil, []string{"run", "-on-error=fail", "-min-healthy-time=-1s", "web"}, "Invalid -min-healthy-time"},
		{"min-healthy-time past deadline", nil, []string{"run", "-on-error=fail", "-min-healthy-time=10m", "web"}, "shorter than -healthy-deadline"},
		{"Consul refused, job with Consul checks", nil, []string{"run", "-on-error=fail", "-consul-address=http://127.0.0.1:1", "checked"}, "-health running"},
		{"no Consul, job with Consul checks", nil, []string{"run", "-on-error=fail", "-health=checks", "checked"}, "Consul"},
		{"consul client cert without key", nil, []string{"run", "-on-error=fail", "-consul-client-cert=c.pem", "web"}, "go together"},
		{"bad consul-tls-skip-verify", nil, []string{"run", "-on-error=fail", "-consul-tls-skip-verify=maybe", "web"}, "consul-tls-skip-verify"},
		{"zero max-unavailable", nil, []string{"run", "-on-error=fail", "-max-unavailable=0", "web"}, "Invalid -max-unavailable"},
		{"max-unavailable smaller than a batch", nil, []string{"run", "-on-error=fail", "-batch-size=2", "-max-unavailable=1", "web"}, "lower -batch-size or raise -max-unavailable"},
		{"surge 0", nil, []string{"run", "-on-error=fail", "-surge=0", "web"}, `Invalid -surge value "0"`},
		{"surge negative", nil, []string{"run", "-on-error=fail", "-surge=-1", "web"}, `Invalid -surge value "-1"`},
		{"surge not a number", nil, []string{"run", "-on-error=fail", "-surge=two", "web"}, `Invalid -surge value "two"`},
		{"surge-ignore-scaling without surge", nil, []string{"run", "-on-error=fail", "-surge-ignore-scaling", "web"}, "needs -surge"},
		{"surge on a batch job", nil, []string{"run", "-on-error=fail", "-surge=1", "batchy"}, "service jobs only"},
		{"surge on a group with a scaling policy", nil, []string{"run", "-on-error=fail", "-surge=1", "scaled"}, "-surge-ignore-scaling"},
		{"surge past the scaling policy's max", nil, []string{"run", "-on-error=fail", "-surge=3", "-surge-ignore-scaling", "scaled"}, "lower -surge"},
		{"drain negative", nil, []string{"run", "-on-error=fail", "-drain=-2s", "web"}, `Invalid -drain value "-2s"`},
		{"drain not a duration", nil, []string{"run", "-on-error=fail", "-drain=2", "web"}, `Invalid -drain value "2"`},
		{"drain too long", nil, []string{"run", "-on-error=fail", "-drain=1h", "web"}, "to 5m0s"},
		{"drain with Consul refused", nil, []string{"run", "-on-error=fail", "-health=running", "-drain=2s", "-consul-address=http://127.0.0.1:1", "checked"}, "-drain needs Consul, but Consul at http://127.0.0.1:1 refused the connection: set -consul-address or CONSUL_HTTP_ADDR, or set -drain 0"},
		{"bad log level", nil, []string{"run", "-on-error=fail", "-log-level=loud", "web"}, "Invalid -log-level"},
		{"request-timeout zero", nil, []string{"run", "-on-error=fail", "-request-timeout=0s", "web"}, `invalid value "0s" for flag -request-timeout: want a positive duration, like 10s`},
		{"request-timeout without unit", nil, []string{"status", "-request-timeout=10"}, `invalid value "10" for flag -request-timeout`},
		{"request-timeout in the environment", &badTimeoutEnv, []string{"run", "-on-error=fail", "web"}, `invalid NOMAD_RESTART_REQUEST_TIMEOUT "soon": want a positive duration, like 10s, or unset it for 10s`},
		{"unknown job", nil, []string{"run", "-on-error=fail", "nosuch"}, `No job(s) with prefix or ID "nosuch"`},
		{"ambiguous job", nil, []string{"run", "-on-error=fail", "api-"}, "matched multiple jobs"},
		{"unknown namespace", nil, []string{"run", "-on-error=fail", "-namespace=nowhere", "web"}, "web"},
		{"unknown group", nil, []string{"run", "-on-error=fail", "-group=nosuch", "web"}, `group "nosuch" not found`},
		{"unknown task", nil, []string{"run", "-on-error=fail", "-task=nosuch", "web"}, `task "nosuch" not found`},
		{"task outside the group", nil, []string{"run", "-on-error=fail", "-group=single_task", "-task=sidecar", "web"}, `task "sidecar" not found`},
		{"sysbatch with reschedule", nil, []string{"run", "-on-error=fail", "-reschedule", "sb"}, "not allowed to be rescheduled"},
		{"unreachable address", nil, []string{"run", "-on-error=fail", "-address=http://127.0.0.1:1", "web"}, "cannot reach Nomad at http://127.0.0.1:1"},
		{"job already has a restart", nil, []string{"run", "-on-error=fail", "-state=local", "-detach", "api-a"}, "already has restart " + pendingID[:8]},
		{"no token with ACLs", &aclEnv, []string{"run", "-on-error=fail", "secure"}, "Permission denied"},
		{"-state nomad without variable permission", &opEnv, []string{"run", "-on-error=fail", "-state=nomad", "secure"}, "cannot keep the restart in Nomad Variables"},
		{"prefix without list-jobs", &roEnv, []string{"run", "-on-error=fail", "secu"}, `No job(s) with prefix or ID "secu"`},
		{"status: two IDs", nil, append([]string{"status"}, append(local1, "abcd", "ee")...), "too many arguments"},
		{"status: -job with an ID", nil, append([]string{"status", "-job=web"}, append(local1, "abcd1111")...), "cannot be used together"},
		{"status: ID matching nothing", nil, append([]string{"status"}, append(local1, "ffff")...), `no restart matches ID "ffff"`},
		{"status: ID matching several", nil, append([]string{"status"}, append(local1, "abcd")...), `matched 2 restarts`},
		{"status: bad state", nil, []string{"status", "-state=cloud"}, `Invalid -state value "cloud"`},
		{"attach without ID", nil, append([]string{"attach"}, local1...), "missing restart ID"},
		{"attach: unknown ID", nil, append([]string{"attach"}, append(local1, "ffff")...), "no restart matches"},
		{"pause: ID matching several", nil, append([]string{"pause"}, append(local1, "abcd")...), "matched 2 restarts"},
		{"pause: ended restart", nil, append([]string{"pause"}, append(local1, "ee00")...), "already ended"},
		{"cancel: two IDs", nil, append([]string{"cancel"}, append(local1, "abcd1111", "abcd2222")...), "too many arguments"},
		{"resume: ended restart", nil, append([]string{"resume"}, append(local1, "ee00")...), "already ended"},
		{"answer without answer", nil, append([]string{"answer"}, append(local1, pendingID[:8])...), "takes a restart ID and an answer"},
		{"answer with nothing to answer", nil, append([]string{"answer"}, append(local1, pendingID[:8], "yes")...), "not waiting for an answer"},
		{"answer: unknown ID", nil, append([]string{"answer"}, append(local1, "ffff", "yes")...), "no restart matches"},
		{"version with arguments", nil, []string{"version", "now"}, "takes no arguments"},
		{"demo with arguments", nil, []string{"demo", "web"}, "takes no arguments"},
		{"demo with detach", nil, []string{"demo", "-detach"}, "cannot be detached"},
		{"-at with -every", nil, []string{"run", "-at=" + future, "-every=@daily", "web"}, "-at and -every cannot be used together"},
		{"-at in the past", nil, []string{"run", "-at=2020-01-01T00:00:00Z", "web"}, "in the past"},
		{"-at unreadable", nil, []string{"run", "-at=soon", "web"}, `Invalid -at value "soon"`},
		{"-every unreadable", nil, []string{"run", "-every=61 * * * *", "web"}, "Invalid -every value"},
		{"-every never again", nil, []string{"run", "-every=0 0 1 1 * 2020", "web"}, "names no time after now"},
		{"-time-zone unknown", nil, []string{"run", "-every=@daily", "-time-zone=Mars/Olympus", "web"}, "Invalid -time-zone"},
		{"-time-zone without -every", nil, []string{"run", "-on-error=fail", "-time-zone=UTC", "web"}, "-time-zone applies to -every"},
		{"-schedule-grace without a schedule", nil, []string{"run", "-on-error=fail", "-schedule-grace=1m", "web"}, "-schedule-grace applies"},
		{"-schedule-grace zero", nil, []string{"run", "-every=@daily", "-schedule-grace=0s", "web"}, "Invalid -schedule-grace"},
		{"-at with -detach", nil, []string{"run", "-at=" + future, "-detach", "web"}, "-detach cannot be used with -at"},
		{"-every with -dry-run", nil, []string{"run", "-every=@daily", "-dry-run", "web"}, "-dry-run cannot be used with -at or -every"},
		{"-at with -state local", nil, []string{"run", "-at=" + future, "-state=local", "web"}, "-state local cannot be used with -at"},
		{"-at for an unknown job", nil, []string{"run", "-at=" + future, "nosuch"}, `No job(s) with prefix or ID "nosuch"`},
		{"-every with an unknown group", nil, []string{"run", "-every=@daily", "-group=nosuch", "web"}, `group "nosuch" not found`},
		// An empty value is most often a script's unset variable: refused, never taken for
		// "not given" (which would restart now, or every allocation).
		{"-every empty", nil, []string{"run", "-every=", "web"}, `Invalid -every value "": it is empty; give a cron expression`},
		{"-at empty", nil, []string{"run", "-at", "", "web"}, `Invalid -at value "": it is empty`},
		{"-filter empty", nil, []string{"run", "-on-error=fail", "-filter", "", "web"}, `Invalid -filter value "": it is empty`},
		{"-jobs blank", nil, []string{"run", "-on-error=fail", "-jobs", " "}, `Invalid -jobs value " ": it is empty`},
		{"-namespace empty", nil, []string{"run", "-on-error=fail", "-namespace=", "web"}, `Invalid -namespace value "": it is empty`},
		{"-health empty", nil, []string{"run", "-on-error=fail", "-health=", "web"}, `Invalid -health value "": it is empty`},
		{"-drain empty", nil, []string{"run", "-on-error=fail", "-drain=", "web"}, `Invalid -drain value "": it is empty`},
		{"status -address empty", nil, []string{"status", "-address="}, `Invalid -address value "": it is empty`},
		{"batch-size over 100%", nil, []string{"run", "-on-error=fail", "-batch-size=101%", "web"}, `Invalid -batch-size value "101%": a percentage must be at most 100%`},
		{"batch-wait too long", nil, []string{"run", "-on-error=fail", "-batch-wait=99999999999h", "web"}, `Invalid -batch-wait value "99999999999h": it is too long`},
		{"on-error ask with -json", nil, []string{"run", "-json", "-on-error=ask", "web"}, `Invalid -on-error value "ask"`},
		{"schedules with an argument", nil, []string{"schedules", "web"}, "schedules takes options only"},
		{"unschedule without ID", nil, []string{"unschedule"}, "missing schedule ID"},
		{"unschedule: unknown ID", nil, []string{"unschedule", "ffff"}, `no schedule matches ID "ffff"`},
	}
	if len(cases) < 40 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			env, sim := e, c
			if tc.env != nil {
				env = *tc.env
				if env.addr == acl.Addr() {
					sim = acl
				}
			}
			runRefused(t, ctx, env, sim, tc.name != "no command", tc.want, tc.args...)
		})
	}
}

// TestCommandsThatAskNothingRunWithoutATerminal runs, off a terminal and without -yes, every
// command that asks nothing and changes nothing (a dry run with its default -on-error ask,
// or with -batch-wait ask; status; schedules; stale), as a script or a CI job does: each exits 0
// with nothing on stderr and writes nothing to Nomad (but for status' lease probe, see
// probesLease). A real run that could ask is still refused there.
func TestCommandsThatAskNothingRunWithoutATerminal(t *testing.T) {
	c, e, ctx := startWebEnv(t, 2)
	id, _ := e.runDetached(t, ctx, "web") // a record for status to show

	cases := []struct {
		name string
		args []string
		want string // in stdout
		// probesLease: status of a restart in flight says whether a process drives it by
		// taking the restart's lease and releasing it at once (store.LeaseFree): two writes
		// to the lease variable, none to the restart or the job.
		probesLease bool
	}{
		{"dry run with the defaults", []string{"run", "-dry-run", "web"}, "on-error=fail", false},
		{"dry run says why on-error is fail", []string{"run", "-dry-run", "web"}, "Note: -on-error fail: there is no terminal", false},
		{"dry run of a detached restart with -batch-wait ask", []string{"run", "-dry-run", "-detach", "-batch-size=1", "-batch-wait=ask", "web"}, "then asks before the next batch", false},
		{"dry run as JSON", []string{"run", "-dry-run", "-json", "web"}, `"OnError":"fail"`, false},
		{"status", []string{"status"}, id, false},
		{"status of one restart", []string{"status", id}, "web", true},
		{"status as JSON", []string{"status", "-json"}, id, false},
		{"schedules", []string{"schedules"}, "No schedules", false},
		{"schedules as JSON", []string{"schedules", "-json"}, "[]", false},
		{"stale", []string{"stale"}, `No job with templates in namespace "default"`, false},
		{"stale as JSON", []string{"stale", "-json"}, "[]", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := c.Stats().Mutations
			code, out, errOut := e.run(ctx, tc.args...)
			if code != 0 || errOut != "" {
				t.Fatalf("%q off a terminal: exit %d\nstderr: %s\nstdout: %s", tc.args, code, errOut, out)
			}
			if !strings.Contains(out, tc.want) {
				t.Fatalf("%q: output lacks %q:\n%s", tc.args, tc.want, out)
			}
			if !tc.probesLease {
				assertNoMutationsSince(t, c, before)
			}
		})
	}

	var plan restart.Record
	_, out, _ := e.run(ctx, "run", "-dry-run", "-json", "web")
	if err := json.Unmarshal([]byte(out), &plan); err != nil || len(plan.Allocs) != 2 || plan.Spec.OnError != restart.OnErrorFail {
		t.Fatalf("dry-run plan as JSON: %v %+v\n%s", err, plan.Spec, out)
	}
	before := c.Stats().Mutations

	// "ask" given off a terminal needs someone to answer: refused before anything changes,
	// in a dry run as in the run it previews.
	code, out, errOut := e.run(ctx, "run", "-on-error=ask", "web")
	if code != 1 || !strings.Contains(errOut, `Invalid -on-error value "ask": "ask" needs an interactive terminal`) || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("run off a terminal: exit %d\nstderr: %s\nstdout: %s", code, errOut, out)
	}
	assertNoMutationsSince(t, c, before)
}

// TestHelpCommand: `help <command>` prints that command's help, as `<command> -help` does,
// and exits 0; `help` alone prints the usage; a command that does not exist is one line
// naming it and the commands, exit 1.
func TestHelpCommand(t *testing.T) {
	for _, c := range commands() {
		code, out, errOut := runCLI("help", c.name)
		_, viaFlag, _ := runCLI(c.name, "-help")
		if code != 0 || out != strings.TrimSpace(c.Help())+"\n" || errOut != "" {
			t.Errorf("help %s: exit %d, stderr %q, stdout starts %q; want its help, exit 0", c.name, code, errOut, firstLine(out))
		}
		if out != viaFlag {
			t.Errorf("help %s prints %q, %s -help %q", c.name, firstLine(out), c.name, firstLine(viaFlag))
		}
	}
	for _, args := range [][]string{{"help"}, {"help", "help"}, {"-help"}} {
		code, out, _ := runCLI(args...)
		if code != 0 || !strings.HasPrefix(out, "Usage: nomad-restart <command>") {
			t.Errorf("%v: exit %d, stdout starts %q; want the usage", args, code, firstLine(out))
		}
	}
	code, out, errOut := runCLI("help", "nosuch")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `no command "nosuch"`) || !strings.Contains(errOut, "run, status") {
		t.Errorf("help nosuch: exit %d, stdout %q, stderr %q; want one line naming it, exit 1", code, out, errOut)
	}
}
