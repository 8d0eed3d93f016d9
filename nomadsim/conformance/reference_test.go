package conformance

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// exchange is one request and answer recorded from a real Nomad agent (testdata/nomad-http,
// see its README).
type exchange struct {
	file    string
	Note    string `json:"note"`
	Request struct {
		Method string          `json:"method"`
		Path   string          `json:"path"`
		Body   json.RawMessage `json:"body"`
	} `json:"request"`
	Response struct {
		Status  int               `json:"status"`
		Headers map[string]string `json:"headers"`
		Body    json.RawMessage   `json:"body"`
		Frames  []json.RawMessage `json:"frames"`
	} `json:"response"`
}

func loadExchanges(t *testing.T) []*exchange {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "nomad-http", "*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recorded exchanges in testdata/nomad-http (%v)", err)
	}
	sort.Strings(files)
	var out []*exchange
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		x := &exchange{file: filepath.Base(f)}
		if err := json.Unmarshal(b, x); err != nil {
			t.Fatalf("decode %s: %v", f, err)
		}
		out = append(out, x)
	}
	return out
}

// replay holds what a replay learned of the sim's objects, to put the sim's IDs and indexes
// where the recording has the real agent's.
type replay struct {
	t        *testing.T
	tg       *target
	subst    map[string]string // recorded text -> the sim's
	lastBody string            // the last answer, shown when its fields fall short
	heldLock string            // the lock ID the replay leaves held, released at cleanup
}

// compare checks the sim's answer to one recorded request: status code, content type, the
// X-Nomad-* headers present, the error text of a plain-text answer, and the JSON field set.
// A field the real agent sent and the sim did not is an error; a field the sim sends in
// addition (Nomad's own structs omit some empty fields, the api module's types do not) is
// only logged.
func (rp *replay) compare(x *exchange) rawResponse {
	t := rp.t
	t.Helper()
	path := rp.apply(x.Request.Path)
	var body *strings.Reader
	if len(x.Request.Body) > 0 && string(x.Request.Body) != "null" {
		body = strings.NewReader(rp.apply(string(x.Request.Body)))
	}
	var r rawResponse
	if body != nil {
		r = rp.tg.do(t, x.Request.Method, path, rp.tg.token, body)
	} else {
		r = rp.tg.do(t, x.Request.Method, path, rp.tg.token, nil)
	}
	rp.lastBody = string(r.body)
	rp.check(x, path, r)
	return r
}

func (rp *replay) check(x *exchange, path string, r rawResponse) {
	t := rp.t
	t.Helper()
	where := fmt.Sprintf("%s (%s %s)", x.file, x.Request.Method, path)
	if r.status != x.Response.Status {
		t.Errorf("%s: status %d, recorded %d (body %.200q)", where, r.status, x.Response.Status, r.body)
		return
	}
	if want, got := x.Response.Headers["Content-Type"], r.header.Get("Content-Type"); want != got {
		t.Errorf("%s: Content-Type %q, recorded %q", where, got, want)
	}
	for _, h := range []string{"X-Nomad-Index", "X-Nomad-Knownleader", "X-Nomad-Lastcontact"} {
		_, want := x.Response.Headers[h]
		got := r.header.Get(h) != ""
		if want != got {
			t.Errorf("%s: header %s present %v, recorded %v", where, h, got, want)
		}
	}
	var recorded any
	if err := json.Unmarshal(x.Response.Body, &recorded); err != nil {
		t.Fatalf("%s: recorded body: %v", where, err)
	}
	switch want := recorded.(type) {
	case string:
		if strings.HasPrefix(x.Response.Headers["Content-Type"], "text/plain") || want == "" {
			if string(r.body) != want {
				t.Errorf("%s: body %q, recorded %q", where, r.body, want)
			}
			return
		}
		var got string
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Errorf("%s: body %.200q, recorded a JSON string", where, r.body)
		}
	default:
		var got any
		if err := json.Unmarshal(r.body, &got); err != nil {
			t.Errorf("%s: body %.200q is not JSON: %v", where, r.body, err)
			return
		}
		rp.compareKeys(where, fieldSet(x.file, want), fieldSet(x.file, got), apiTypes[x.file[:2]])
	}
}

// apiTypes names the api module's type of each recorded answer whose fields are checked.
// The sim encodes those types, so a field Nomad's server sends that the api type lacks
// cannot come from the sim and no api client reads it: such a gap is logged, not failed.
var apiTypes = map[string]reflect.Type{
	"03": reflect.TypeFor[api.NodeListStub](),
	"04": reflect.TypeFor[api.Namespace](),
	"06": reflect.TypeFor[api.JobListStub](),
	"07": reflect.TypeFor[api.JobListStub](),
	"08": reflect.TypeFor[api.JobListStub](),
	"11": reflect.TypeFor[api.AllocationListStub](),
	"12": reflect.TypeFor[api.AllocationListStub](),
	"14": reflect.TypeFor[api.Deployment](),
	"15": reflect.TypeFor[api.Deployment](),
	"17": reflect.TypeFor[api.AllocationListStub](),
	"18": reflect.TypeFor[api.AllocationListStub](),
	"19": reflect.TypeFor[api.Allocation](),
	"22": reflect.TypeFor[api.Allocation](),
	"26": reflect.TypeFor[api.Allocation](),
	"27": reflect.TypeFor[api.Allocation](),
	"57": reflect.TypeFor[api.Allocation](),
}

// hasJSONField tells whether values of type ty encode a top-level field named name.
func hasJSONField(ty reflect.Type, name string) bool {
	for f := range ty.Fields() {
		tag := strings.Split(f.Tag.Get("json"), ",")[0]
		if tag == "-" {
			continue
		}
		if f.Anonymous && tag == "" {
			if hasJSONField(f.Type, name) {
				return true
			}
			continue
		}
		if tag == name || tag == "" && f.Name == name {
			return true
		}
	}
	return false
}

func (rp *replay) compareKeys(where string, want, got []string, ty reflect.Type) {
	t := rp.t
	t.Helper()
	var missing, notInAPI, extra []string
	for _, k := range want {
		if slices.Contains(got, k) {
			continue
		}
		if ty != nil && !hasJSONField(ty, k) {
			notInAPI = append(notInAPI, k)
		} else {
			missing = append(missing, k)
		}
	}
	if len(notInAPI) > 0 {
		t.Logf("%s: fields the recording has that the api module's %s lacks (the sim cannot send them): %v", where, ty.Name(), notInAPI)
	}
	for _, k := range got {
		if !slices.Contains(want, k) {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s: fields missing from the %s's answer: %v (answer: %.300s)", where, rp.tg.name, missing, rp.lastBody)
	}
	if len(extra) > 0 {
		t.Logf("%s: fields the %s sends in addition (the recording omitted them): %v", where, rp.tg.name, extra)
	}
}

// fieldSet is the set of top-level JSON keys of an answer: of the object, of the union of a
// list's objects, or, for the checks endpoint (an object keyed by check ID), of its values.
func fieldSet(file string, v any) []string {
	set := map[string]bool{}
	add := func(o any) {
		if m, ok := o.(map[string]any); ok {
			for k := range m {
				set[k] = true
			}
		}
	}
	switch v := v.(type) {
	case map[string]any:
		if strings.Contains(file, "checks") {
			for _, c := range v {
				add(c)
			}
			// Nomad omits StatusCode when the check got no HTTP status (a refused
			// connection): the recorded check had passed, a replayed one need not.
			delete(set, "StatusCode")
		} else {
			add(v)
		}
	case []any:
		for _, o := range v {
			add(o)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// apply replaces the recording's IDs and indexes with the sim's.
func (rp *replay) apply(s string) string {
	for from, to := range rp.subst {
		s = strings.ReplaceAll(s, from, to)
	}
	return s
}

// Recorded identifiers of the real agent's objects (see the exchanges' bodies).
const (
	recSleepy1     = "0c167182-0c38-d4a7-de65-1e23946d2e45" // sleepy.g[1]
	recSleepy0     = "44eb8390-df98-4a7c-8a57-efff508744e6" // sleepy.g[0], stopped in 25
	recSleepy0Next = "536a2e61-71c6-086a-2a45-a689471ab06c" // its replacement
	recSleepy2     = "da2b2025-2fca-d6b7-7d50-15de70fc8e9f" // sleepy.g[2], stopped in 28
	recWeb0        = "420beacf-6468-9f8a-46e0-e89720c8e6d1" // web.web[0]
	recReaderAlloc = "5e6a97b0-f825-cfe7-6ea5-11cf4d2dc26c" // an allocation of the ACL agent
	recLockID      = "ad91af68-f739-849a-b641-8701d1e6f73e"
)

// webJob is the job "web" the recording's agent ran: two allocations of a task "server" with a
// Nomad service "web" and an HTTP check. On a real agent the task serves HTTP with python3's
// http.server, so that its check passes and its deployment completes as recorded.
func webJob() *api.Job {
	server := sleepTask("server")
	server.Config["args"] = []string{"-c", "exec python3 -m http.server --bind 127.0.0.1 ${NOMAD_PORT_http}"}
	job := serviceJob("web", 2, server)
	g := job.TaskGroups[0]
	g.Name = ptr("web")
	g.Networks = []*api.NetworkResource{{DynamicPorts: []api.Port{{Label: "http"}}}}
	g.Services = []*api.Service{{
		Name: "web", PortLabel: "http", Provider: "nomad",
		Checks: []api.ServiceCheck{{Type: "http", Path: "/", Interval: time.Second, Timeout: time.Second}},
	}}
	return job
}

// TestReferenceExchanges replays the requests recorded from a real agent, after building
// the same objects, and compares the answers' shapes: against the sim always, and against a
// real agent when NOMAD_CONFORMANCE_ADDR names one (which checks the replay itself). The
// replay uses the recording's names (jobs sleepy, web, impossible; variables under
// nomad-restart/), so a real agent must not hold objects of those names.
func TestReferenceExchanges(t *testing.T) {
	exchanges := loadExchanges(t)
	byFile := map[string]*exchange{}
	for _, x := range exchanges {
		byFile[x.file[:2]] = x
	}
	t.Run("acls-off", func(t *testing.T) {
		forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
			if tg.acls {
				t.Skip(envToken + " set: the agent enforces ACLs, these exchanges were recorded without")
			}
			rp := &replay{t: t, tg: tg, subst: map[string]string{}}
			tg.register(t, webJob())
			web := tg.waitRunning(t, "web", 2)
			tg.waitDeploymentSuccessful(t, "web")
			for _, a := range web {
				if a.Name == "web.web[0]" {
					rp.subst[recWeb0] = a.ID
				}
			}
			t.Cleanup(rp.cleanup)
			for _, x := range exchanges {
				n := x.file[:2]
				if n >= "53" && n <= "56" || n == "57" {
					continue // the ACL agent's, and the event stream: below
				}
				rp.before(n)
				r := rp.compare(x)
				rp.after(n, r)
			}
			rp.eventStream(byFile["57"])
		})
	})
	t.Run("acls-on", func(t *testing.T) {
		forEachTarget(t, targetOptions{acls: true}, func(t *testing.T, tg *target) {
			rp := &replay{t: t, tg: tg, subst: map[string]string{}}
			tg.register(t, sleepJob(tg.id("sleepy"), 1))
			rp.subst[recReaderAlloc] = tg.waitRunning(t, tg.id("sleepy"), 1)[0].ID
			reader := tg.createToken(t, tg.id("reader"), readerRules)
			for _, n := range []string{"53", "54", "55", "56"} {
				x := byFile[n]
				token := reader
				switch n {
				case "53":
					token = ""
				case "54":
					token = tg.token
				}
				var r rawResponse
				if string(x.Request.Body) != "null" {
					r = tg.do(t, x.Request.Method, rp.apply(x.Request.Path), token, strings.NewReader(string(x.Request.Body)))
				} else {
					r = tg.do(t, x.Request.Method, rp.apply(x.Request.Path), token, nil)
				}
				rp.lastBody = string(r.body)
				rp.check(x, rp.apply(x.Request.Path), r)
			}
		})
	})
}

// cleanup removes what the replay made besides the web job: on a real agent they outlive
// the test.
func (rp *replay) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wo := (&api.WriteOptions{}).WithContext(ctx)
	for _, job := range []string{"sleepy", "impossible"} {
		_, _, _ = rp.tg.api.Jobs().Deregister(job, true, wo)
	}
	if id := rp.heldLock; id != "" {
		_, _, _ = rp.tg.api.Variables().ReleaseLock(&api.Variable{Path: "nomad-restart/lock", Lock: &api.VariableLock{ID: id}}, wo)
	}
	for _, path := range []string{"nomad-restart/lock", "nomad-restart/demo"} {
		_, _ = rp.tg.api.Variables().Delete(path, wo)
	}
}

// before brings the sim to the state the real agent was in when it answered exchange n.
func (rp *replay) before(n string) {
	t, tg := rp.t, rp.tg
	t.Helper()
	switch n {
	case "06":
		// The recording lists sleepy running, its deployment done.
		allocs := tg.waitRunning(t, "sleepy", 3)
		tg.waitDeploymentSuccessful(t, "sleepy")
		for _, a := range allocs {
			switch a.Name {
			case "sleepy.g[0]":
				rp.subst[recSleepy0] = a.ID
			case "sleepy.g[1]":
				rp.subst[recSleepy1] = a.ID
				rp.subst["prefix="+recSleepy1[:8]] = "prefix=" + a.ID[:8]
			case "sleepy.g[2]":
				rp.subst[recSleepy2] = a.ID
			}
		}
	case "12":
		r := tg.do(t, "GET", "/v1/job/sleepy/allocations", tg.token, nil)
		rp.subst["index=28&wait=2s"] = fmt.Sprintf("index=%d&wait=1s", headerIndex(t, r))
	case "26":
		old := tg.waitAlloc(t, rp.subst[recSleepy0], "stopped allocation replaced", func(a *api.Allocation) bool { return a.NextAllocation != "" })
		rp.subst[recSleepy0Next] = old.NextAllocation
	case "33":
		tg.waitEvals(t, "impossible", "a blocked evaluation", func(evals []*api.Evaluation) bool {
			return slices.ContainsFunc(evals, func(e *api.Evaluation) bool { return e.Status == "blocked" })
		})
	case "37":
		v, _, err := tg.api.Variables().Read("nomad-restart/demo", nil)
		if err != nil {
			t.Fatalf("read variable for 37: %v", err)
		}
		rp.subst["cas=64"] = fmt.Sprintf("cas=%d", v.ModifyIndex)
	case "48":
		v, _, err := tg.api.Variables().Read("nomad-restart/demo", nil)
		if err != nil {
			t.Fatalf("read variable for 48: %v", err)
		}
		rp.subst["cas=66"] = fmt.Sprintf("cas=%d", v.ModifyIndex)
	}
}

// after learns from the sim's answer to exchange n what later exchanges refer to.
func (rp *replay) after(n string, r rawResponse) {
	t := rp.t
	t.Helper()
	switch n {
	case "46":
		var v api.Variable
		if err := json.Unmarshal(r.body, &v); err == nil && v.Lock != nil {
			rp.heldLock = v.Lock.ID
		}
	case "41":
		var v api.Variable
		if err := json.Unmarshal(r.body, &v); err != nil || v.Lock == nil {
			t.Fatalf("41: no lock in the sim's answer %.200q (%v)", r.body, err)
		}
		rp.subst[recLockID] = v.Lock.ID
	}
}

// eventStream compares the first event of the sim's allocation stream for job web with the
// recorded frames: the event's fields and its payload's allocation fields.
func (rp *replay) eventStream(x *exchange) {
	t, tg := rp.t, rp.tg
	t.Helper()
	// A restart of a web allocation puts allocation events in the buffer; the stream starts
	// after the index read before it, as the recording shows the restart's events.
	from := headerIndex(t, tg.do(t, "GET", "/v1/job/web/allocations", tg.token, nil)) + 1
	if err := tg.api.Allocations().Restart(&api.Allocation{ID: rp.subst[recWeb0]}, "", nil); err != nil {
		t.Fatalf("57: restart a web allocation: %v", err)
	}
	var recorded struct {
		Events []map[string]json.RawMessage
	}
	for _, f := range x.Response.Frames {
		if err := json.Unmarshal(f, &recorded); err == nil && len(recorded.Events) > 0 {
			break
		}
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s%s&index=%d", tg.addr, x.Request.Path, from), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tg.token != "" {
		req.Header.Set("X-Nomad-Token", tg.token)
	}
	resp, err := tg.http.Do(req)
	if err != nil {
		t.Fatalf("57: open the event stream: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != x.Response.Status {
		t.Fatalf("57: status %d, recorded %d", resp.StatusCode, x.Response.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 || string(line) == "{}" {
			continue
		}
		var frame struct {
			Index  uint64
			Events []map[string]json.RawMessage
		}
		if err := json.Unmarshal(line, &frame); err != nil {
			t.Fatalf("57: frame %.200q is not JSON: %v", line, err)
		}
		if len(frame.Events) == 0 {
			t.Fatalf("57: frame without events: %.200q", line)
		}
		// A payload's fields depend on the allocation's life (a fresh placement has no task
		// states yet): compare with an event like the recorded one, an update of an
		// allocation whose tasks have states.
		for _, e := range frame.Events {
			var typ string
			var payload map[string]map[string]any
			_ = json.Unmarshal(e["Type"], &typ)
			if err := json.Unmarshal(e["Payload"], &payload); err != nil {
				t.Fatalf("57: payload %.200q: %v", e["Payload"], err)
			}
			if typ != "AllocationUpdated" || payload["Allocation"]["TaskStates"] == nil {
				continue
			}
			rp.lastBody = string(line)
			rp.compareKeys("57 event", mapKeys(recorded.Events[0]), mapKeys(e), nil)
			var want map[string]map[string]any
			_ = json.Unmarshal(recorded.Events[0]["Payload"], &want)
			rp.compareKeys("57 payload", mapKeys(want), mapKeys(payload), nil)
			rp.compareKeys("57 payload allocation", fieldSet("", want["Allocation"]), fieldSet("", payload["Allocation"]), apiTypes["57"])
			return
		}
	}
	t.Fatalf("57: the stream ended without an update of an allocation with task states: %v", sc.Err())
}

func mapKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
