package conformance

import (
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
)

// templateJob is the suite's sleeping job whose task "main" renders local/config.txt from
// the variable at varPath, read through a literal path (so that a real client and the sim
// both re-render it when the variable changes), with change_mode noop and a short wait.
func templateJob(id, varPath string) *api.Job {
	task := sleepTask("main")
	task.Templates = []*api.Template{{
		DestPath:     ptr("local/config.txt"),
		EmbeddedTmpl: ptr(`greeting={{ with nomadVar "` + varPath + `" }}{{ .greeting }}{{ end }}` + "\n"),
		ChangeMode:   ptr("noop"),
		Wait:         &api.WaitConfig{Min: ptr(time.Second), Max: ptr(2 * time.Second)},
	}}
	return serviceJob(id, 1, task)
}

// fsPath is the raw URL of a filesystem request about the allocation.
func fsPath(op, allocID, path string) string {
	return "/v1/client/fs/" + op + "/" + allocID + "?path=" + url.QueryEscape(path)
}

// A template's file as the filesystem API shows it: rendered before the task started,
// re-rendered (and nothing else) when its variable changes, as the sim promises and a
// real client does.
func TestAllocFSTemplateRerender(t *testing.T) {
	forEachTarget(t, targetOptions{}, func(t *testing.T, tg *target) {
		id := tg.id("fs")
		// nomad/jobs/<job> is readable by the job's tasks whatever the ACLs.
		varPath := "nomad/jobs/" + id
		tg.deleteVarLater(t, varPath)
		if _, _, err := tg.api.Variables().Update(&api.Variable{Path: varPath, Items: map[string]string{"greeting": "hello"}}, nil); err != nil {
			t.Fatalf("write variable %s: %v", varPath, err)
		}
		tg.register(t, templateJob(id, varPath))
		stub := tg.waitRunning(t, id, 1)[0]
		alloc, _, err := tg.api.Allocations().Info(stub.ID, nil)
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		before := alloc.TaskStates["main"]
		fs := tg.api.AllocFS()

		f, _, err := fs.Stat(alloc, "main/local/config.txt", nil)
		if err != nil {
			t.Fatalf("stat main/local/config.txt: %v", err)
		}
		if f.Name != "config.txt" || f.IsDir || f.Size <= 0 || f.FileMode != "-rw-r--r--" || f.ContentType != "text/plain; charset=utf-8" {
			t.Errorf("stat main/local/config.txt: %+v", f)
		}
		if !f.ModTime.Before(before.StartedAt) {
			t.Errorf("rendered at %v, not before the task started at %v", f.ModTime, before.StartedAt)
		}
		list, _, err := fs.List(alloc, "main/local", nil)
		if err != nil {
			t.Fatalf("ls main/local: %v", err)
		}
		var listed *api.AllocFileInfo
		for _, x := range list {
			if x.Name == "config.txt" {
				listed = x
			}
		}
		if listed == nil || listed.IsDir || listed.Size != f.Size || listed.FileMode != f.FileMode || !listed.ModTime.Equal(f.ModTime) || listed.ContentType != "" {
			t.Errorf("ls main/local: config.txt is %+v, want stat's %+v without a content type", listed, f)
		}

		missing := tg.do(t, "GET", fsPath("stat", alloc.ID, "main/local/nope.txt"), tg.token, nil)
		if missing.status != 404 || !strings.HasSuffix(string(missing.body), "/main/local/nope.txt: no such file or directory") {
			t.Errorf("stat of a missing file: %d %q", missing.status, missing.body)
		}
		escapes := tg.do(t, "GET", fsPath("stat", alloc.ID, "../.."), tg.token, nil)
		if escapes.status != 500 || string(escapes.body) != "Path escapes the alloc directory" {
			t.Errorf("stat of a path out of the alloc dir: %d %q", escapes.status, escapes.body)
		}
		noPath := tg.do(t, "GET", "/v1/client/fs/stat/"+alloc.ID, tg.token, nil)
		if noPath.status != 400 || string(noPath.body) != "must provide a file name" {
			t.Errorf("stat without a path: %d %q", noPath.status, noPath.body)
		}
		// Listing the secrets directory is allowed (only reads of its files are not).
		if _, _, err := fs.List(alloc, "main/secrets", nil); err != nil {
			t.Errorf("ls main/secrets: %v", err)
		}

		if _, _, err := tg.api.Variables().Update(&api.Variable{Path: varPath, Items: map[string]string{"greeting": "hello again"}}, nil); err != nil {
			t.Fatalf("update variable %s: %v", varPath, err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			f, _, err = fs.Stat(alloc, "main/local/config.txt", nil)
			if err == nil && f.ModTime.After(before.StartedAt) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("config.txt not re-rendered within 30s of the variable's change: %+v (%v)", f, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		if f.Size <= 0 || f.FileMode != "-rw-r--r--" {
			t.Errorf("re-rendered file: %+v", f)
		}
		after, _, err := tg.api.Allocations().Info(alloc.ID, nil)
		if err != nil {
			t.Fatalf("read allocation: %v", err)
		}
		ts := after.TaskStates["main"]
		if len(ts.Events) != len(before.Events) || !ts.StartedAt.Equal(before.StartedAt) || ts.Restarts != 0 || ts.State != "running" {
			t.Errorf("a noop re-render changed the task: events %s -> %s, StartedAt %v -> %v, restarts %d, state %s",
				eventTypes(before.Events), eventTypes(ts.Events), before.StartedAt, ts.StartedAt, ts.Restarts, ts.State)
		}
	})
}

// The filesystem API needs read-fs, which the write policy grants and the read one does
// not.
func TestAllocFSACL(t *testing.T) {
	forEachTarget(t, targetOptions{acls: true}, func(t *testing.T, tg *target) {
		stub := tg.runSleepJob(t, tg.id("fs-acl"), 1)[0]
		reader := tg.createToken(t, tg.id("fs-reader"), readerRules)
		writer := tg.createToken(t, tg.id("fs-writer"), `namespace "default" { policy = "write" }`)
		for _, op := range []string{"stat", "ls"} {
			denied(t, op+" with a read token", tg.do(t, "GET", fsPath(op, stub.ID, "main/local"), reader, nil), "Permission denied")
			denied(t, op+" without a token", tg.do(t, "GET", fsPath(op, stub.ID, "main/local"), "", nil), "Permission denied")
			if r := tg.do(t, "GET", fsPath(op, stub.ID, "main/local"), writer, nil); r.status != 200 {
				t.Errorf("%s with a write token: %d %q", op, r.status, r.body)
			}
		}
	})
}
