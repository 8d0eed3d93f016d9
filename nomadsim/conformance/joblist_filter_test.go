package conformance

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// metaJob is a sleeping service job with the given meta (nil for none) and priority.
func metaJob(id string, priority int, meta map[string]string) *api.Job {
	job := sleepJob(id, 1)
	job.Priority = ptr(priority)
	job.Meta = meta
	return job
}

// listIDs lists the jobs the filter selects among the case's (those whose ID has prefix) and
// returns their namespaces and IDs in the order Nomad answered them.
func (tg *target) listIDs(t *testing.T, namespace, prefix, filter string, withMeta bool) ([]*api.JobListStub, []string) {
	t.Helper()
	q := (&api.QueryOptions{Namespace: namespace, Prefix: prefix, Filter: filter}).WithContext(tg.ctx(t))
	// The api client sorts the answer by ID alone; the raw order is checked apart.
	stubs, _, err := tg.api.Jobs().ListOptions(&api.JobListOptions{Fields: &api.JobListFields{Meta: withMeta}}, q)
	if err != nil {
		t.Fatalf("list jobs in %q with prefix %q and filter %q: %v", namespace, prefix, filter, err)
	}
	ids := make([]string, 0, len(stubs))
	for _, s := range stubs {
		ids = append(ids, s.Namespace+"/"+s.ID)
	}
	return stubs, ids
}

// rawJobList lists jobs with the query as plain HTTP and decodes the answer into one map of
// fields per job, so that a field's absence shows.
func (tg *target) rawJobList(t *testing.T, query url.Values) []map[string]json.RawMessage {
	t.Helper()
	r := tg.do(t, "GET", "/v1/jobs?"+query.Encode(), tg.token, nil)
	if r.status != 200 {
		t.Fatalf("GET /v1/jobs?%s = %d %q", query.Encode(), r.status, r.body)
	}
	var out []map[string]json.RawMessage
	if err := json.Unmarshal(r.body, &out); err != nil {
		t.Fatalf("GET /v1/jobs?%s: decode %q: %v", query.Encode(), r.body, err)
	}
	return out
}

// TestJobListMeta checks the jobs list's meta=true (the api's JobListFields{Meta: true}):
// each stub carries its job's Meta then, and only then; a filter on Meta selects either way.
func TestJobListMeta(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		prefix := tg.id("meta-")
		a, b, c := tg.id("meta-a"), tg.id("meta-b"), tg.id("meta-c")
		tg.register(t, metaJob(a, 50, map[string]string{"team": "core", "nomad-restart.batch-size": "2"}))
		tg.register(t, metaJob(b, 70, map[string]string{"team": "front"}))
		tg.register(t, metaJob(c, 50, nil))

		stubs, ids := tg.listIDs(t, "default", prefix, "", true)
		if want := []string{"default/" + a, "default/" + b, "default/" + c}; !reflect.DeepEqual(ids, want) {
			t.Fatalf("jobs with meta=true = %v, want %v", ids, want)
		}
		if want := map[string]string{"team": "core", "nomad-restart.batch-size": "2"}; !reflect.DeepEqual(stubs[0].Meta, want) {
			t.Errorf("job %s with meta=true: Meta %v, want %v", a, stubs[0].Meta, want)
		}
		if stubs[2].Meta != nil {
			t.Errorf("job %s without meta, with meta=true: Meta %v, want none", c, stubs[2].Meta)
		}

		for _, query := range []url.Values{{"prefix": {prefix}}, {"prefix": {prefix}, "meta": {"false"}}} {
			for _, stub := range tg.rawJobList(t, query) {
				if _, ok := stub["Meta"]; ok {
					t.Errorf("GET /v1/jobs?%s: stub %s has a Meta field, want none", query.Encode(), stub["ID"])
				}
			}
		}
		for _, stub := range tg.rawJobList(t, url.Values{"prefix": {prefix}, "meta": {"true"}}) {
			var id string
			_ = json.Unmarshal(stub["ID"], &id)
			if _, ok := stub["Meta"]; ok != (id != c) {
				t.Errorf("GET /v1/jobs?meta=true: stub %s has Meta %v, want %v (absent when the job has none)", id, ok, id != c)
			}
		}

		cases := []struct {
			filter string
			want   []string
		}{
			{`Meta.team == "core"`, []string{a}},
			{`Meta.team != "core"`, []string{b, c}}, // a job without meta has no team: not "core"
			{`Meta["nomad-restart.batch-size"] == "2"`, []string{a}},
			{`"team" in Meta`, []string{a, b}},
			{`Meta is empty`, []string{c}},
			{`Priority == 70`, []string{b}},
			{`Name matches "-meta-[ab]$" and Type == "service"`, []string{a, b}},
			{`ParentID == "" and Stop == false`, []string{a, b, c}},
		}
		for _, cs := range cases {
			for _, withMeta := range []bool{false, true} {
				stubs, ids := tg.listIDs(t, "default", prefix, cs.filter, withMeta)
				var want []string
				for _, id := range cs.want {
					want = append(want, "default/"+id)
				}
				if len(ids) != len(want) || (len(want) > 0 && !reflect.DeepEqual(ids, want)) {
					t.Errorf("filter %q, meta=%v: jobs %v, want %v", cs.filter, withMeta, ids, want)
				}
				for _, s := range stubs {
					if (s.Meta != nil) && !withMeta {
						t.Errorf("filter %q without meta=true: job %s carries Meta %v", cs.filter, s.ID, s.Meta)
					}
				}
			}
		}
	})
}

// TestJobListFilterErrors checks Nomad's answers to a filter it cannot read or apply: a 400
// in plain text, without the X-Nomad-Index a read's answer carries; an expression that does
// not parse is refused by every paginated list with the same text.
func TestJobListFilterErrors(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		// A job under the prefix: Nomad fails applying a filter only to an object it reads.
		prefix := tg.id("flterr-")
		tg.register(t, metaJob(tg.id("flterr-a"), 50, map[string]string{"team": "core"}))

		const unreadable = `failed to create result paginator: failed to read filter expression: 1:6 (5): no match found, expected: "-", "0", "\"", "` + "`" + `", [ \t\r\n], [1-9] or [a-zA-Z]`
		cases := []struct {
			path, filter, text string
		}{
			{"/v1/jobs", `ID === "x"`, unreadable},
			{"/v1/allocations", `ID === "x"`, unreadable},
			{"/v1/deployments", `ID === "x"`, unreadable},
			{"/v1/evaluations", `ID === "x"`, unreadable},
			{"/v1/nodes", `ID === "x"`, unreadable},
			// Nomad applies the filter to the job, not to the stub it answers: the stub's
			// JobSummary is no field of a job, and Periodic is the job's periodic block.
			{"/v1/jobs", `JobSummary.Summary.g.Running == 1`, `failed to read result page: error finding value in datum: /JobSummary/Summary/g/Running at part 0: couldn't find key: struct field with name "JobSummary"`},
			{"/v1/jobs", `Nosuch == "x"`, `failed to read result page: error finding value in datum: /Nosuch at part 0: couldn't find key: struct field with name "Nosuch"`},
			{"/v1/jobs", `Periodic == false`, `failed to read result page: unable to find suitable primitive comparison function for matching`},
			{"/v1/jobs", `Name matches "["`, "failed to read result page: failed to compile regular expression \"[\": error parsing regexp: missing closing ]: `[`"},
		}
		for _, c := range cases {
			query := url.Values{"filter": {c.filter}}
			if c.path == "/v1/jobs" {
				query.Set("prefix", prefix)
			}
			r := tg.do(t, "GET", c.path+"?"+query.Encode(), tg.token, nil)
			if r.status != 400 || string(r.body) != c.text {
				t.Errorf("GET %s filter %q = %d %q, want 400 %q", c.path, c.filter, r.status, r.body, c.text)
			}
			if ct := r.header.Get("Content-Type"); ct != "text/plain; charset=utf-8" {
				t.Errorf("GET %s filter %q: Content-Type %q, want plain text", c.path, c.filter, ct)
			}
			if idx := r.header.Get("X-Nomad-Index"); idx != "" {
				t.Errorf("GET %s filter %q: X-Nomad-Index %q on an error of the servers, want none", c.path, c.filter, idx)
			}
		}

		r := tg.do(t, "GET", "/v1/jobs?meta=yes", tg.token, nil)
		if want := `Failed to parse value of "meta" (yes) as a bool: strconv.ParseBool: parsing "yes": invalid syntax`; r.status != 500 || string(r.body) != want {
			t.Errorf("GET /v1/jobs?meta=yes = %d %q, want 500 %q", r.status, r.body, want)
		}
	})
}

// TestJobListFilterAllNamespaces checks a filter over every namespace (namespace=*): Nomad
// answers the jobs it selects in every namespace, ordered by namespace, then ID.
func TestJobListFilterAllNamespaces(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		ns := tg.id("fltns")
		tg.registerNamespace(t, ns)
		team := tg.id("team")
		// The namespace's name sorts before "default", its job's ID after the other's: the
		// order by namespace, then ID, is not the order by ID.
		inDefault, inNS, other := tg.id("fltns-b"), tg.id("fltns-z"), tg.id("fltns-c")
		tg.register(t, metaJob(inDefault, 50, map[string]string{"team": team}))
		nsJob := metaJob(inNS, 50, map[string]string{"team": team})
		nsJob.Namespace = ptr(ns)
		tg.registerIn(t, ns, nsJob)
		tg.register(t, metaJob(other, 50, map[string]string{"team": "someone-else"}))

		filter := `Meta.team == "` + team + `"`
		_, ids := tg.listIDs(t, "*", "", filter, true)
		if want := []string{"default/" + inDefault, ns + "/" + inNS}; !reflect.DeepEqual(ids, want) { // the client's order: by ID
			t.Errorf("namespace=* filter %q: jobs %v, want %v", filter, ids, want)
		}
		_, ids = tg.listIDs(t, "default", "", filter, false)
		if want := []string{"default/" + inDefault}; !reflect.DeepEqual(ids, want) {
			t.Errorf("namespace default, filter %q: jobs %v, want %v", filter, ids, want)
		}

		// The answer's own order: by namespace, then ID.
		var order []string
		for _, stub := range tg.rawJobList(t, url.Values{"namespace": {"*"}, "filter": {filter}}) {
			var nsName, id string
			_ = json.Unmarshal(stub["Namespace"], &nsName)
			_ = json.Unmarshal(stub["ID"], &id)
			order = append(order, nsName+"/"+id)
		}
		if want := []string{ns + "/" + inNS, "default/" + inDefault}; !reflect.DeepEqual(order, want) {
			t.Errorf("GET /v1/jobs?namespace=*&filter=%s: order %v, want %v", filter, order, want)
		}

		filter = `Namespace == "` + ns + `"`
		if _, ids = tg.listIDs(t, "*", "", filter, false); !reflect.DeepEqual(ids, []string{ns + "/" + inNS}) {
			t.Errorf("namespace=* filter %q: jobs %v, want [%s/%s]", filter, ids, ns, inNS)
		}
	})
}

// registerNamespace creates a namespace and deletes it when the test ends (after the
// cleanups registered later, such as those purging its jobs).
func (tg *target) registerNamespace(t *testing.T, name string) {
	t.Helper()
	if _, err := tg.api.Namespaces().Register(&api.Namespace{Name: name}, (&api.WriteOptions{}).WithContext(tg.ctx(t))); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = tg.api.Namespaces().Delete(name, (&api.WriteOptions{}).WithContext(ctx))
	})
}

// registerIn registers job in namespace ns and purges it when the test ends.
func (tg *target) registerIn(t *testing.T, ns string, job *api.Job) {
	t.Helper()
	if _, _, err := tg.api.Jobs().Register(job, (&api.WriteOptions{Namespace: ns}).WithContext(tg.ctx(t))); err != nil {
		t.Fatalf("register job %s in namespace %s: %v", *job.ID, ns, err)
	}
	id := *job.ID
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _, _ = tg.api.Jobs().Deregister(id, true, (&api.WriteOptions{Namespace: ns}).WithContext(ctx))
	})
}

// TestJobListPeriodic checks a periodic job in the jobs list: Nomad lists it running (it
// runs until stopped; its launches are jobs of their own) and marked Periodic, and a filter
// reads its periodic block.
func TestJobListPeriodic(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("periodic")
		job := api.NewBatchJob(id, id, "global", 50)
		job.Datacenters = []string{"dc1"}
		job.Meta = map[string]string{"team": "core"}
		job.AddPeriodicConfig(&api.PeriodicConfig{Specs: []string{"0 3 * * *"}, Enabled: ptr(true)})
		job.AddTaskGroup(api.NewTaskGroup("g", 1).AddTask(exitTask("main")))
		tg.register(t, job)

		stubs, _ := tg.listIDs(t, "default", id, `Periodic.Enabled == true and Meta.team == "core"`, true)
		if len(stubs) != 1 || stubs[0].ID != id {
			t.Fatalf("periodic job with filter on its periodic block: %d jobs, want %s", len(stubs), id)
		}
		if s := stubs[0]; !s.Periodic || s.ParameterizedJob || s.Status != "running" || s.Type != "batch" {
			t.Errorf("periodic job stub: Periodic %v ParameterizedJob %v Status %q Type %q, want true false running batch", s.Periodic, s.ParameterizedJob, s.Status, s.Type)
		}
	})
}
