package sim

// The simulated allocation directory: the tree Nomad's client builds for an allocation
// (client/allocdir/alloc_dir.go Build, task_dir.go Build), the files its template runners
// render into it, and the answers of the filesystem API about it (allocdir List and Stat,
// behind command/agent/fs_endpoint.go). Files have no content: a template's file has the
// size of a stand-in content and changes when its version does. Every method runs with
// c.Mu held.

import (
	"io/fs"
	"net/http"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/nomad-restart/nomad-restart/nomadsim/internal/simhttp"
)

// clientAllocRoot is where the simulated clients keep allocation directories:
// <data_dir>/alloc/<alloc ID>, with the data_dir Nomad's Linux packages configure. Only the
// texts of the filesystem API's errors show it, as a real client's show its own.
const clientAllocRoot = "/opt/nomad/data/alloc"

// Modes of the directories Nomad makes (client/allocdir): the alloc dir itself is made
// with 0755; every other one with allocMkdirAll, whose dropDirPermissions chmods it to
// perms|0777 (so 0755 becomes 0777 too); a task's tmp is sticky.
const (
	modeAllocDir  = fs.ModeDir | 0o755
	modeOpenDir   = fs.ModeDir | 0o777
	modeStickyDir = fs.ModeDir | fs.ModeSticky | 0o777
	// consul-template's renderer makes a destination's missing parents with 0755
	// (renderer.AtomicWrite), under the agent's usual umask of 022.
	modeRenderDir = fs.ModeDir | 0o755
	// The task API socket is made usable by everyone (helper/users SocketFileFor).
	modeSocket = fs.ModeSocket | 0o666
	// The tmpfs marker file and the task's log files are created with 0666 under the
	// agent's umask of 022; logmon's fifos with 0600.
	modeMarker = 0o644
	modeLog    = 0o644
	modeFifo   = fs.ModeNamedPipe | 0o600
	// dirSize is what a directory's stat shows on the usual filesystems (ext4, xfs).
	dirSize = 4096
)

// allocFileInfo is Nomad's AllocFileInfo (client/structs) on the wire: unlike the api
// module's, it leaves out an empty ContentType (ls never sets one). Fields are in the
// order Nomad's encoder writes them.
type allocFileInfo struct {
	ContentType string `json:",omitempty"`
	FileMode    string
	IsDir       bool
	ModTime     time.Time
	Name        string
	Size        int64
}

// fsEntry is a file or directory of the simulated tree.
type fsEntry struct {
	mode  fs.FileMode
	size  int64
	mtime time.Time
	// tmpfs marks a tmpfs mount point, whose size is 20 bytes per entry, "." and ".."
	// included (seen on a real client: 60 for secrets' marker alone).
	tmpfs bool
}

// AllocFS is an allocation's directory on its client.
type AllocFS struct {
	root    string              // absolute path on the client
	entries map[string]*fsEntry // by clean slash path relative to root; "." is root
}

// newAllocFS builds the allocation's directory as the alloc runner's alloc dir hook and
// each task runner's task dir hook do: the shared alloc/ with logs/, tmp/ and data/, and
// per task local/, tmp/, secrets/ and private/. secrets/ and private/ are tmpfs mounts on a
// client running as root, as clients usually do, which leaves a marker file in each
// (allocdir/fs_linux.go createSecretDir).
func newAllocFS(ar *AllocRun, now time.Time) *AllocFS {
	f := &AllocFS{root: clientAllocRoot + "/" + ar.Alloc.ID, entries: map[string]*fsEntry{}}
	f.entries["."] = &fsEntry{mode: modeAllocDir, size: dirSize, mtime: now}
	f.mkdir("alloc", modeOpenDir, now)
	for _, d := range []string{"logs", "tmp", "data"} {
		f.mkdir("alloc/"+d, modeOpenDir, now)
	}
	for _, tr := range ar.Tasks {
		name := tr.Task.Name
		f.mkdir(name, modeOpenDir, now)
		f.mkdir(name+"/local", modeOpenDir, now)
		f.mkdir(name+"/tmp", modeStickyDir, now)
		for _, d := range []string{"secrets", "private"} {
			f.mkdir(name+"/"+d, modeOpenDir, now)
			f.entries[name+"/"+d].tmpfs = true
			f.put(name+"/"+d+"/.nomad-mount", modeMarker, 0, now)
		}
	}
	return f
}

// mkdir makes a directory whose parent exists.
func (f *AllocFS) mkdir(rel string, mode fs.FileMode, now time.Time) {
	f.put(rel, mode, dirSize, now)
}

// mkdirAll makes rel and its missing parents with mode.
func (f *AllocFS) mkdirAll(rel string, mode fs.FileMode, now time.Time) {
	if rel == "." {
		return
	}
	if _, ok := f.entries[rel]; ok {
		return
	}
	f.mkdirAll(path.Dir(rel), mode, now)
	f.mkdir(rel, mode, now)
}

// put creates or replaces an entry; like any creation or rename into a directory, it
// moves the directory's modification time.
func (f *AllocFS) put(rel string, mode fs.FileMode, size int64, now time.Time) {
	f.entries[rel] = &fsEntry{mode: mode, size: size, mtime: now}
	if dir := f.entries[path.Dir(rel)]; dir != nil {
		dir.mtime = now
	}
}

// writeFile writes a file as consul-template's renderer does: missing parents are made,
// then the content goes to a temporary file renamed over the destination, so the file has
// the new modification time and the mode the template asks for whatever it had.
func (f *AllocFS) writeFile(rel string, perm fs.FileMode, size int64, now time.Time) {
	f.mkdirAll(path.Dir(rel), modeRenderDir, now)
	f.put(rel, perm, size, now)
}

// remove deletes an entry (a file; directories are never removed).
func (f *AllocFS) remove(rel string, now time.Time) {
	if _, ok := f.entries[rel]; !ok {
		return
	}
	delete(f.entries, rel)
	if dir := f.entries[path.Dir(rel)]; dir != nil {
		dir.mtime = now
	}
}

// errPathEscapes is allocdir's answer to a path outside the allocation directory; the
// agent answers it as any uncoded error, a 500.
var errPathEscapes = simhttp.Errorf(http.StatusInternalServerError, "Path escapes the alloc directory")

// resolve turns a path of the API into the entry's key and its absolute path, refusing
// one that escapes the directory as escapingfs.PathEscapesAllocViaRelative does: the path
// is joined to a stand-in directory two levels deep, and escapes when the result, relative
// to it, starts with "..", a name such as "..x" included.
func (f *AllocFS) resolve(p string) (rel, abs string, err error) {
	const base = "/alloc-dir/alloc-id"
	joined := path.Join(base, p)
	switch {
	case joined == base:
		rel = "."
	case strings.HasPrefix(joined, base+"/"):
		rel = strings.TrimPrefix(joined, base+"/")
	default:
		return "", "", errPathEscapes
	}
	if strings.HasPrefix(rel, "..") {
		return "", "", errPathEscapes
	}
	return rel, path.Join(f.root, rel), nil
}

// find resolves p and finds its entry as the OS would for op (lookup).
func (f *AllocFS) find(op, p string) (rel, abs string, e *fsEntry, err error) {
	if rel, abs, err = f.resolve(p); err != nil {
		return "", "", nil, err
	}
	e, err = f.lookup(op, rel, abs)
	return rel, abs, e, err
}

// lookup finds an entry as the OS would for op ("stat", or "open" for a listing): a
// missing one is ENOENT, which the agent answers 404 (IsErrNoSuchFileOrDirectory). A path
// through a file fails before, in the escape check's filepath.EvalSymlinks (ENOTDIR is
// not the "does not exist" it lets through), a 500 (seen on a real client).
func (f *AllocFS) lookup(op, rel, abs string) (*fsEntry, error) {
	if e := f.entries[rel]; e != nil {
		return e, nil
	}
	for dir := path.Dir(rel); dir != "."; dir = path.Dir(dir) {
		if e := f.entries[dir]; e != nil {
			if !e.mode.IsDir() {
				return nil, simhttp.Errorf(http.StatusInternalServerError, "Failed to check if path escapes alloc directory: not a directory")
			}
			break
		}
	}
	return nil, NotFound(op + " " + abs + ": no such file or directory")
}

// Stat is allocdir's Stat: the entry's info with a content type.
func (f *AllocFS) Stat(p string) (*allocFileInfo, error) {
	rel, abs, e, err := f.find("stat", p)
	if err != nil {
		return nil, err
	}
	info := f.info(rel, path.Base(abs))
	info.ContentType = contentType(e, abs)
	return info, nil
}

// List is allocdir's List: os.ReadDir of the directory, sorted by name, without content
// types.
func (f *AllocFS) List(p string) ([]*allocFileInfo, error) {
	rel, abs, e, err := f.find("open", p)
	if err != nil {
		return nil, err
	}
	if !e.mode.IsDir() {
		// os.ReadDir opens with O_DIRECTORY.
		return nil, simhttp.Errorf(http.StatusInternalServerError, "open "+abs+": not a directory")
	}
	names := f.children(rel)
	out := make([]*allocFileInfo, 0, len(names))
	for _, n := range names {
		out = append(out, f.info(path.Join(rel, n), n))
	}
	return out, nil
}

// children are the names in directory rel, sorted.
func (f *AllocFS) children(rel string) []string {
	prefix := rel + "/"
	if rel == "." {
		prefix = ""
	}
	var names []string
	for k := range f.entries {
		if k != "." && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			names = append(names, k[len(prefix):])
		}
	}
	sort.Strings(names)
	return names
}

// info is the entry at rel as the API shows it, under name.
func (f *AllocFS) info(rel, name string) *allocFileInfo {
	e := f.entries[rel]
	size := e.size
	if e.tmpfs {
		size = int64(20 * (2 + len(f.children(rel))))
	}
	return &allocFileInfo{Name: name, IsDir: e.mode.IsDir(), Size: size, FileMode: e.mode.String(), ModTime: e.mtime}
}

// contentType is allocdir's detectContentType: http.DetectContentType of a regular file's
// first bytes (a rendered template's text is text/plain; an empty file, whose read is EOF,
// and anything that cannot be read keep application/octet-stream), and application/json
// for any path ending in .json, directories included.
func contentType(e *fsEntry, abs string) string {
	ct := "application/octet-stream"
	if e.mode.IsRegular() && e.size > 0 {
		ct = "text/plain; charset=utf-8"
	}
	if strings.HasSuffix(abs, ".json") {
		ct = "application/json"
	}
	return ct
}
