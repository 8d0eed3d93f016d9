package cluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/nomad-restart/nomad-restart/internal/restart"
)

// FileReader reads allocations' directories through Nomad's allocation filesystem API
// (/v1/client/fs), which the servers forward to the allocation's client: what rollouts on
// re-renders need to see when Nomad last wrote a template's destination.
type FileReader interface {
	// FileTimes returns the modification time of each of paths (relative to the
	// allocation directory, as "web/local/app.conf") that exists, with one listing per
	// directory. A path whose file or directory is missing is left out. Errors:
	// ErrPermissionDenied (the token lacks the namespace's read-fs capability),
	// ErrAllocNotFound (the allocation or its client is gone), or a transport error.
	FileTimes(ctx context.Context, allocID string, paths []string) (map[string]time.Time, error)
}

// FileTimes lists the directories of paths in one allocation.
func (n *Nomad) FileTimes(ctx context.Context, allocID string, paths []string) (map[string]time.Time, error) {
	byDir := map[string][]string{}
	var dirs []string
	for _, p := range paths {
		dir := path.Dir(p)
		if _, ok := byDir[dir]; !ok {
			dirs = append(dirs, dir)
		}
		byDir[dir] = append(byDir[dir], path.Base(p))
	}
	out := make(map[string]time.Time, len(paths))
	// Only the allocation's ID is sent: the api's List takes an allocation for its ID.
	alloc := &api.Allocation{ID: allocID}
	for _, dir := range dirs {
		files, err := read(ctx, n, "listing an allocation's directory", func(ctx context.Context) ([]*api.AllocFileInfo, error) {
			files, _, err := n.client.AllocFS().List(alloc, dir, queryOpts(ctx, ""))
			return files, err
		})
		switch {
		case missingPath(err):
			continue
		case err != nil:
			return nil, fmt.Errorf("listing %q of allocation %q: %w", dir, allocID, classifyFS(err))
		}
		for _, f := range files {
			for _, name := range byDir[dir] {
				if f.Name == name && !f.IsDir {
					out[dir+"/"+name] = f.ModTime
				}
			}
		}
	}
	return out, nil
}

// missingPath reports a 404 for a path of a known allocation: Nomad answers a missing
// file or directory with 404 and the client's OS error (command/agent/fs_endpoint.go:
// IsErrNoSuchFileOrDirectory), and an unknown allocation with 404 "Unknown allocation".
func missingPath(err error) bool {
	return err != nil && statusCode(err) == http.StatusNotFound && strings.Contains(err.Error(), "no such file or directory")
}

// classifyFS is classify for the filesystem API, where a 404 that is not a missing path
// means the allocation (or its client's connection) is gone.
func classifyFS(err error) error {
	err = classify(err, ErrAllocNotFound)
	if errors.Is(err, ErrPermissionDenied) {
		return fmt.Errorf("%w (the token needs the read-fs capability on the job's namespace)", err)
	}
	return err
}

// FileTimesRead is what ReadFileTimes read of a job's allocations.
type FileTimesRead struct {
	// Times are the modification times read, by allocation ID, then by path.
	Times map[string]map[string]time.Time
	// Failed are the allocations whose files could not be read, with why (a denial
	// included); an allocation gone since it was listed is in neither map: it runs no more.
	Failed map[string]error
	// Denied says a read was refused for the token (the namespace's read-fs capability):
	// the reading stopped there, as every other allocation of the namespace is refused too.
	Denied bool
}

// ReadFileTimes reads, in each running allocation whose group has paths, the
// modification times of those paths (FileTimes), with at most cap(slots) listings in
// flight at once across every caller that shares slots: each is forwarded by a server to
// the allocation's client. It returns when every read ended, or at ctx's end.
func ReadFileTimes(ctx context.Context, files FileReader, allocs []*restart.Alloc, paths map[string][]string, slots chan struct{}) FileTimesRead {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	out := FileTimesRead{Times: map[string]map[string]time.Time{}, Failed: map[string]error{}}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, a := range allocs {
		p := paths[a.Group]
		if len(p) == 0 || a.ClientStatus != restart.ClientRunning || a.DesiredStatus != restart.DesiredRun {
			continue
		}
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			return out
		}
		if ctx.Err() != nil {
			<-slots // slots may be shared: give back what is not used
			break
		}
		wg.Go(func() {
			defer func() { <-slots }()
			times, err := files.FileTimes(ctx, a.ID, p)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				out.Times[a.ID] = times
			case errors.Is(err, ErrAllocNotFound):
			case errors.Is(err, ErrPermissionDenied):
				out.Failed[a.ID], out.Denied = err, true
				cancel()
			case ctx.Err() == nil:
				out.Failed[a.ID] = err
			}
		})
	}
	wg.Wait()
	return out
}
