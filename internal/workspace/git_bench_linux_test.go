package workspace

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/testutil"
)

// BenchmarkDiffJail measures what confining host-side git costs (see
// gitx.Jail): `ws diff` of a 20,000-file copy workspace with 50 files
// changed, confined and unconfined, interleaved run by run so that machine
// noise hits both. It reports the median of each and their ratio.
//
//	go test -run '^$' -bench DiffJail -benchtime 20x ./internal/workspace
func BenchmarkDiffJail(b *testing.B) {
	confined, commit, _ := hostGit20k(b)
	for i := 0; i < 50; i++ {
		p := filepath.Join(confined.Files, fmt.Sprintf("pkg%03d", i*4), "f000.go")
		if err := os.WriteFile(p, []byte("package changed\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	unconfined := confined
	unconfined.unconfined = true
	run := func(g Git) time.Duration {
		start := time.Now()
		out, err := g.Diff(b.Context(), commit)
		if err != nil || len(out) == 0 {
			b.Fatalf("diff: %d bytes, %v", len(out), err)
		}
		return time.Since(start)
	}
	run(confined) // the first stage hashes every file; later runs find the index fresh
	run(unconfined)
	b.ResetTimer()
	withJail, without := interleave(b.N, func() time.Duration { return run(confined) }, func() time.Duration { return run(unconfined) })
	b.StopTimer()
	mj, mu := median(withJail), median(without)
	b.ReportMetric(float64(mj.Microseconds())/1000, "ms-confined")
	b.ReportMetric(float64(mu.Microseconds())/1000, "ms-unconfined")
	b.ReportMetric(float64(mj)/float64(mu), "ratio")
}

// BenchmarkForkHostGit measures a fork's host git directory for a parent
// of 20,000 files (a 1.8 MiB index): ForkHostGit, which links the parent's
// index, beside the same directory seeded with a copy of that index (as
// forks made it before), interleaved run by run. It reports the median of
// each and their ratio.
//
//	go test -run '^$' -bench ForkHostGit -benchtime 200x ./internal/workspace
func BenchmarkForkHostGit(b *testing.B) {
	parent, _, mirror := hostGit20k(b)
	// Its index is the checkout's, one entry per file; it holds no loose
	// object of its own (the fork links those as before).
	index := filepath.Join(HostGitDir(parent.Dir), "index")
	if st, err := os.Stat(index); err != nil || st.Size() < 1<<20 {
		b.Fatalf("the parent's index: %v, %v", st, err)
	}
	top := b.TempDir()
	run := func(name string, f func(dir string) error) time.Duration {
		dir := filepath.Join(top, name)
		if err := os.Mkdir(dir, 0o711); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		err := f(dir)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		return took
	}
	linked := func(dir string) error { return ForkHostGit(b.Context(), parent.Dir, dir, mirror) }
	copied := func(dir string) error { return InitHostGit(b.Context(), dir, mirror, index) }
	b.ResetTimer()
	links, copies := interleave(b.N, func() time.Duration { return run("link", linked) }, func() time.Duration { return run("copy", copied) })
	b.StopTimer()
	ml, mc := median(links), median(copies)
	b.ReportMetric(float64(ml.Microseconds())/1000, "ms-link")
	b.ReportMetric(float64(mc.Microseconds())/1000, "ms-copy")
	b.ReportMetric(float64(ml)/float64(mc), "ratio")
}

// hostGit20k makes a copy workspace of a 20,000-file repository with its
// host git directory, and returns it with its commit and the mirror.
func hostGit20k(b *testing.B) (Git, string, string) {
	top := b.TempDir()
	src := filepath.Join(top, "src")
	for d := 0; d < 200; d++ {
		dir := filepath.Join(src, fmt.Sprintf("pkg%03d", d))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := 0; f < 100; f++ {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d.go", f)), fmt.Appendf(nil, "package pkg%03d\n\n// file %d\n", d, f), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	testutil.Git(b, "", "init", "-q", "-b", "main", src)
	testutil.Git(b, src, "add", ".")
	testutil.Git(b, src, "commit", "-q", "-m", "20k files")
	commit := testutil.Git(b, src, "rev-parse", "HEAD")
	mirror := filepath.Join(top, "mirror.git")
	testutil.Git(b, "", "clone", "-q", "--bare", src, mirror)
	d, err := New(Copy)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(top, "ws")
	if err := os.Mkdir(dir, 0o711); err != nil {
		b.Fatal(err)
	}
	if err := d.Create(b.Context(), dir, Source{Repo: store.Repo{ID: "repo_bench", URL: src, Path: mirror}, Commit: commit, UID: testUID, GID: testGID}); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { Remove(context.Background(), d, dir) })
	g := Git{Dir: dir, Files: d.Files(dir)}
	if err := InitHostGit(b.Context(), dir, mirror, filepath.Join(g.Files, ".git", "index")); err != nil {
		b.Fatal(err)
	}
	return g, commit, mirror
}

// interleave runs a and b n times each, alternating which goes first so
// that machine noise hits both, and returns their times.
func interleave(n int, a, b func() time.Duration) (as, bs []time.Duration) {
	for i := range n {
		if i%2 == 0 {
			as = append(as, a())
			bs = append(bs, b())
		} else {
			bs = append(bs, b())
			as = append(as, a())
		}
	}
	return as, bs
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
