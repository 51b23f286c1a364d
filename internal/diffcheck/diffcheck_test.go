package diffcheck

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentbox/agentbox/internal/policy"
)

// Fake secrets of the right shapes, assembled so that this file does not
// itself hold anything a scanner would take for a real one.
var (
	fakeAKIA      = "AKIA" + "IOSFODNN7EXAMPLE"
	fakeASIA      = "ASIA" + "Y34FZKBOKMUTVV7A"
	fakeAWSSecret = "wJalrXUtnFEMI/K7MDENG/" + "bPxRfiCYEXAMPLEKEY"
	fakeGHP       = "ghp_" + strings.Repeat("a1B2", 9)
	fakeGHS       = "ghs_" + strings.Repeat("Z9y8", 9)
	fakePAT       = "github_pat_" + strings.Repeat("A", 22) + "_" + strings.Repeat("b", 59)
	fakeSlack     = "xoxb-" + "123456789012-" + "abcdefABCDEF"
	fakeGoogle    = "AIza" + strings.Repeat("Sy_-", 8) + "abc"
	fakeStripe    = "sk_" + "live_" + strings.Repeat("4eC39HqLyjWD", 2)
	fakeJWT       = "eyJ" + "hbGciOiJIUzI1NiJ9" + ".eyJ" + "zdWIiOiIxMjM0In0" + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV"
)

// newFile is a git diff adding path with lines.
func newFile(path string, lines ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n", path, path, path, len(lines))
	for _, l := range lines {
		b.WriteString("+" + l + "\n")
	}
	return b.String()
}

// kinds is what Check finds in one added line.
func kinds(t *testing.T, line string) []string {
	t.Helper()
	r := Check(nil, []byte(newFile("f.txt", line)), Options{})
	var out []string
	for _, s := range r.Secrets {
		out = append(out, s.Kind)
	}
	return out
}

func TestDetectors(t *testing.T) {
	tests := []struct {
		name string
		line string
		want []string
	}{
		{"aws key id", "key = " + fakeAKIA, []string{KindAWSAccessKeyID}},
		{"aws session key id", `"` + fakeASIA + `"`, []string{KindAWSAccessKeyID}},
		{"aws key id at line start", fakeAKIA, []string{KindAWSAccessKeyID}},
		{"aws key id too short", "AKIA" + "IOSFODNN7EXAMPL", nil},
		{"aws key id too long", fakeAKIA + "X", nil},
		{"aws key id inside a word", "X" + fakeAKIA, nil},
		{"aws key id lower case", strings.ToLower(fakeAKIA), nil},
		{"aws key id wrong prefix", "AKIB" + "IOSFODNN7EXAMPLE", nil},
		{"two aws key ids one byte apart", fakeAKIA + " " + fakeASIA, []string{KindAWSAccessKeyID, KindAWSAccessKeyID}},

		{"aws secret env", "AWS_SECRET_ACCESS_KEY=" + fakeAWSSecret, []string{KindAWSSecretAccessKey}},
		{"aws secret ini", "aws_secret_access_key = " + fakeAWSSecret, []string{KindAWSSecretAccessKey}},
		{"aws secret yaml quoted", `aws_secret_access_key: "` + fakeAWSSecret + `"`, []string{KindAWSSecretAccessKey}},
		{"aws secret json", `"aws_secret_access_key": "` + fakeAWSSecret + `"`, []string{KindAWSSecretAccessKey}},
		{"aws secret unassigned", "secret = " + fakeAWSSecret, nil},
		{"aws secret 39 chars", "aws_secret_access_key=" + fakeAWSSecret[1:], nil},
		{"aws secret 41 chars", "aws_secret_access_key=" + fakeAWSSecret + "Q", nil},
		{"aws secret name only", "aws_secret_access_key = os.environ['X']", nil},

		{"github classic", "token: " + fakeGHP, []string{KindGitHubToken}},
		{"github server-to-server", fakeGHS, []string{KindGitHubToken}},
		{"github oauth user refresh", "gho_" + fakeGHP[4:] + " ghu_" + fakeGHP[4:] + " ghr_" + fakeGHP[4:], []string{KindGitHubToken, KindGitHubToken, KindGitHubToken}},
		{"github fine-grained", "GITHUB_TOKEN=" + fakePAT, []string{KindGitHubToken}},
		{"github wrong letter", "ghx_" + fakeGHP[4:], nil},
		{"github too short", fakeGHP[:39], nil},
		{"github too long", fakeGHP + "a", nil},
		{"github fine-grained short", fakePAT[:len(fakePAT)-1], nil},

		{"slack bot", "SLACK=" + fakeSlack, []string{KindSlackToken}},
		{"slack user", "xoxp-" + "1234-5678-90ab", []string{KindSlackToken}},
		{"slack unknown letter", "xoxc-" + "123456789012-abc", nil},
		{"slack too short", "xoxb-" + "12345", nil},

		{"google", "key=" + fakeGoogle, []string{KindGoogleAPIKey}},
		{"google too short", "key=" + fakeGoogle[:38], nil},
		{"google too long", "key=" + fakeGoogle + "x", nil},

		{"stripe live", "STRIPE=" + fakeStripe, []string{KindStripeLiveKey}},
		{"stripe restricted", "rk_" + "live_" + strings.Repeat("x", 24), []string{KindStripeLiveKey}},
		{"stripe test key", "sk_" + "test_" + strings.Repeat("4eC39HqLyjWD", 2), nil},
		{"stripe live too short", "sk_" + "live_" + "abc", nil},

		{"rsa private key", "-----BEGIN RSA PRIVATE KEY-----", []string{KindPrivateKey}},
		{"openssh private key", "-----BEGIN OPENSSH PRIVATE KEY-----", []string{KindPrivateKey}},
		{"pkcs8 private key", `const k = "-----BEGIN PRIVATE KEY-----\n"`, []string{KindPrivateKey}},
		{"encrypted private key", "-----BEGIN ENCRYPTED PRIVATE KEY-----", []string{KindPrivateKey}},
		{"pgp private key", "-----BEGIN PGP PRIVATE KEY BLOCK-----", []string{KindPrivateKey}},
		{"public key", "-----BEGIN PUBLIC KEY-----", nil},
		{"certificate", "-----BEGIN CERTIFICATE-----", nil},
		{"private key prose", "paste your PRIVATE KEY here", nil},

		{"jwt", "Authorization: Bearer " + fakeJWT, []string{KindJWT}},
		{"jwt unsigned", "eyJ" + "hbGciOiJub25lIn0.eyJzdWIiOiIxIn0.", nil},
		{"jwt second part not json", "eyJ" + "hbGciOiJIUzI1NiJ9.abcdefgh.SflKxwRJSMeKKF2QT4", nil},

		{"plain code", `func main() { fmt.Println("hello") }`, nil},
		{"empty line", "", nil},
		{"two kinds on one line", fakeAKIA + " " + fakeGHP, []string{KindAWSAccessKeyID, KindGitHubToken}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if diff := cmp.Diff(tt.want, kinds(t, tt.line)); diff != "" {
				t.Errorf("kinds in %q (-want +got):\n%s", tt.line, diff)
			}
		})
	}
}

func TestKnownSecrets(t *testing.T) {
	tests := []struct {
		name  string
		known []string
		line  string
		want  []string // excerpts
	}{
		{"found", []string{"hunter2-correct-horse"}, "password = hunter2-correct-horse", []string{"hunt…(21 bytes)"}},
		{"twice", []string{"s3cr3t-value"}, "a=s3cr3t-value b=s3cr3t-value", []string{"s3c…(12 bytes)", "s3c…(12 bytes)"}},
		{"exactly 8 bytes", []string{"8bytes!!"}, "x 8bytes!! y", []string{"8b…(8 bytes)"}},
		{"7 bytes skipped", []string{"7bytes!"}, "x 7bytes! y", nil},
		{"empty skipped", []string{""}, "anything", nil},
		{"absent", []string{"not-in-the-diff"}, "something else", nil},
		{"multi-line value by line", []string{"line-one-of-it\nline-two-of-it\nshort"}, "line-two-of-it", []string{"lin…(14 bytes)"}},
		{"duplicate values once", []string{"dup-dup-dup", "dup-dup-dup"}, "dup-dup-dup", []string{"du…(11 bytes)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(nil, []byte(newFile("cfg.ini", tt.line)), Options{KnownSecrets: tt.known})
			var got []string
			for _, s := range r.Secrets {
				if s.Kind != KindKnownSecret {
					t.Errorf("kind = %q, want %q", s.Kind, KindKnownSecret)
				}
				got = append(got, s.Excerpt)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("excerpts (-want +got):\n%s", diff)
			}
			if r.OK != (len(tt.want) == 0) {
				t.Errorf("OK = %v with %d findings", r.OK, len(tt.want))
			}
		})
	}
}

func TestWritable(t *testing.T) {
	changes := []Change{
		{Status: "M", Path: "README.md"},
		{Status: "A", Path: "src/a/b.go"},
		{Status: "D", Path: "docs/guide.txt"},
		{Status: "M", Path: "docs/notes.md"},
		{Status: "A", Path: "Makefile"},
	}
	// A rename the change list does not show (it was made without rename
	// detection, or raced the diff): both sides are judged.
	rename := "diff --git a/src/old.go b/lib/new.go\nsimilarity index 100%\nrename from src/old.go\nrename to lib/new.go\n"
	tests := []struct {
		name     string
		writable []string
		want     []PathFinding
	}{
		{name: "none means all", writable: nil, want: []PathFinding{}},
		{name: "src/**", writable: []string{"src/**"}, want: []PathFinding{
			{Path: "Makefile", Status: "A"},
			{Path: "README.md", Status: "M"},
			{Path: "docs/guide.txt", Status: "D"},
			{Path: "docs/notes.md", Status: "M"},
			{Path: "lib/new.go", Status: "R", RenamedFrom: "src/old.go"},
		}},
		{name: "*.md", writable: []string{"*.md"}, want: []PathFinding{
			{Path: "Makefile", Status: "A"},
			{Path: "docs/guide.txt", Status: "D"},
			{Path: "docs/notes.md", Status: "M"},
			{Path: "lib/new.go", Status: "R", RenamedFrom: "src/old.go"},
			{Path: "src/a/b.go", Status: "A"},
			{Path: "src/old.go", Status: "R", RenamedTo: "lib/new.go"},
		}},
		{name: "**/*.md and lib/**", writable: []string{"**/*.md", "lib/**"}, want: []PathFinding{
			{Path: "Makefile", Status: "A"},
			{Path: "docs/guide.txt", Status: "D"},
			{Path: "src/a/b.go", Status: "A"},
			{Path: "src/old.go", Status: "R", RenamedTo: "lib/new.go"},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := policy.Policy{WritablePaths: tt.writable}
			r := Check(changes, []byte(rename), Options{Writable: p.PathWritable})
			if diff := cmp.Diff(tt.want, r.OutsideWritable); diff != "" {
				t.Errorf("OutsideWritable (-want +got):\n%s", diff)
			}
			if r.OK != (len(tt.want) == 0) {
				t.Errorf("OK = %v", r.OK)
			}
		})
	}
	t.Run("nil Writable", func(t *testing.T) {
		if r := Check(changes, []byte(rename), Options{}); !r.OK || len(r.OutsideWritable) != 0 {
			t.Errorf("Check without Writable = %+v, want OK", r)
		}
	})
	t.Run("rename in both lists", func(t *testing.T) {
		// The change list's own status stands; the diff adds the rename.
		cs := []Change{{Status: "D", Path: "src/old.go"}, {Status: "A", Path: "lib/new.go"}}
		r := Check(cs, []byte(rename), Options{Writable: policy.Policy{WritablePaths: []string{"src/**"}}.PathWritable})
		want := []PathFinding{{Path: "lib/new.go", Status: "A", RenamedFrom: "src/old.go"}}
		if diff := cmp.Diff(want, r.OutsideWritable); diff != "" {
			t.Errorf("OutsideWritable (-want +got):\n%s", diff)
		}
	})
}

// sampleDiff is a git diff with a modified, a deleted, a binary and a new
// file. The binary patch holds text that would be a hunk with a secret if
// it were read as one.
var sampleDiff = strings.NewReplacer("{AKIA}", fakeAKIA, "{GHP}", fakeGHP).Replace(`diff --git a/app.py b/app.py
index 1111111..2222222 100644
--- a/app.py
+++ b/app.py
@@ -1,4 +1,5 @@
 import os
-KEY = "{AKIA}"
+KEY = os.environ["KEY"]
+TOKEN = "{GHP}"
 
 def main():
@@ -20,3 +21,4 @@ def main():
     x = 1
     # {AKIA} was here
-    y = 2
+    y = 3
+    z = "{AKIA}"
diff --git a/gone.txt b/gone.txt
deleted file mode 100644
index 3333333..0000000
--- a/gone.txt
+++ /dev/null
@@ -1,2 +0,0 @@
-{AKIA}
-bye
diff --git a/logo.bin b/logo.bin
new file mode 100644
index 0000000..4444444
GIT binary patch
literal 24
@@ -0,0 +1 @@
+{AKIA}

literal 0
HcmV?d00001

diff --git a/notes.txt b/notes.txt
new file mode 100644
index 0000000..5555555
--- /dev/null
+++ b/notes.txt
@@ -0,0 +1,3 @@
+first
+--- a/not/a/header {AKIA}
+diff --git a/x b/x {AKIA}
\ No newline at end of file
`)

func TestAddedLinesOnly(t *testing.T) {
	r := Check(nil, []byte(sampleDiff), Options{})
	type at struct {
		Path string
		Line int
		Kind string
	}
	var got []at
	for _, s := range r.Secrets {
		got = append(got, at{s.Path, s.Line, s.Kind})
	}
	// Removed lines (app.py's old KEY, all of gone.txt), context lines and
	// the binary patch are not scanned; line numbers count context and
	// added lines of the new file across hunks; added lines that look like
	// headers are content.
	want := []at{
		{"app.py", 3, KindGitHubToken},
		{"app.py", 24, KindAWSAccessKeyID},
		{"notes.txt", 2, KindAWSAccessKeyID},
		{"notes.txt", 3, KindAWSAccessKeyID},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	if r.OK {
		t.Error("OK = true with secrets")
	}
}

func TestLineNumbers(t *testing.T) {
	tests := []struct {
		name string
		diff string
		want []int
	}{
		{"new file", newFile("a", "x", fakeAKIA, "y", fakeAKIA), []int{2, 4}},
		{"second hunk", "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1 +1 @@\n-x\n+" + fakeAKIA + "\n@@ -100,2 +100,3 @@\n ctx\n+" + fakeAKIA + "\n ctx\n", []int{1, 101}},
		{"count omitted", "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -7 +7 @@\n-x\n+" + fakeAKIA + "\n", []int{7}},
		{"removed lines do not count", "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,4 +1,2 @@\n-x\n-y\n-z\n ctx\n+" + fakeAKIA + "\n", []int{2}},
		{"stripped context line", "diff --git a/a b/a\n--- a/a\n+++ b/a\n@@ -1,2 +1,3 @@\n ctx\n\n+" + fakeAKIA + "\n", []int{3}},
		{"crlf file", "diff --git a/a b/a\r\n--- a/a\r\n+++ b/a\r\n@@ -1 +1,2 @@\r\n x\r\n+" + fakeAKIA + "\r\n", []int{2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			for _, s := range Check(nil, []byte(tt.diff), Options{}).Secrets {
				got = append(got, s.Line)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPaths(t *testing.T) {
	tests := []struct {
		name string
		diff string
		want string
	}{
		{"plain", newFile("dir/a.txt", fakeAKIA), "dir/a.txt"},
		{"space", "diff --git a/my file b/my file\nnew file mode 100644\n--- /dev/null\n+++ b/my file\t\n@@ -0,0 +1 @@\n+" + fakeAKIA + "\n", "my file"},
		{"quoted", "diff --git \"a/tab\\there\" \"b/tab\\there\"\nnew file mode 100644\n--- /dev/null\n+++ \"b/tab\\there\"\n@@ -0,0 +1 @@\n+" + fakeAKIA + "\n", "tab\there"},
		{"octal", "diff --git \"a/caf\\303\\251\" \"b/caf\\303\\251\"\n--- \"a/caf\\303\\251\"\n+++ \"b/caf\\303\\251\"\n@@ -1 +1 @@\n-x\n+" + fakeAKIA + "\n", "café"},
		{"renamed and edited", "diff --git a/old.txt b/new.txt\nsimilarity index 90%\nrename from old.txt\nrename to new.txt\n--- a/old.txt\n+++ b/new.txt\n@@ -1 +1 @@\n-x\n+" + fakeAKIA + "\n", "new.txt"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Check(nil, []byte(tt.diff), Options{})
			if len(r.Secrets) != 1 || r.Secrets[0].Path != tt.want {
				t.Errorf("secrets = %+v, want one in %q", r.Secrets, tt.want)
			}
		})
	}
	// A binary file has no ---/+++ lines: its path comes from the
	// "diff --git" line.
	bin := "diff --git a/img/x y.png b/img/x y.png\nnew file mode 100644\nindex 0000000..1111111\nGIT binary patch\nliteral 3\nKcmZQz000010\n\n"
	r := Check(nil, []byte(bin), Options{Writable: func(string) bool { return false }})
	want := []PathFinding{{Path: "img/x y.png", Status: "A"}}
	if diff := cmp.Diff(want, r.OutsideWritable); diff != "" {
		t.Errorf("binary file path (-want +got):\n%s", diff)
	}
}

func TestOrder(t *testing.T) {
	// git lists files in its own order; the report's is path, then line.
	diff := newFile("z.txt", fakeAKIA) + newFile("a.txt", "x", fakeGHP, fakeAKIA) + newFile("a.txt", "x", fakeGHP, fakeAKIA)
	r := Check([]Change{{Status: "A", Path: "z.txt"}, {Status: "A", Path: "a.txt"}}, []byte(diff), Options{Writable: func(string) bool { return false }})
	var got []string
	for _, s := range r.Secrets {
		got = append(got, fmt.Sprintf("%s:%d:%s", s.Path, s.Line, s.Kind))
	}
	want := []string{"a.txt:2:github-token", "a.txt:3:aws-access-key-id", "z.txt:1:aws-access-key-id"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("secrets (-want +got):\n%s", diff)
	}
	wantPaths := []PathFinding{{Path: "a.txt", Status: "A"}, {Path: "z.txt", Status: "A"}}
	if diff := cmp.Diff(wantPaths, r.OutsideWritable); diff != "" {
		t.Errorf("OutsideWritable (-want +got):\n%s", diff)
	}
}

func TestRedaction(t *testing.T) {
	secrets := []string{fakeAKIA, fakeGHP, fakePAT, fakeSlack, fakeGoogle, fakeStripe, fakeJWT, "my-known-secret-value"}
	lines := append([]string{"aws_secret_access_key=" + fakeAWSSecret}, secrets...)
	r := Check(nil, []byte(newFile("leak.txt", lines...)), Options{KnownSecrets: []string{"my-known-secret-value"}})
	if len(r.Secrets) != len(lines) {
		t.Fatalf("found %d secrets, want %d: %+v", len(r.Secrets), len(lines), r.Secrets)
	}
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(secrets, fakeAWSSecret) {
		// Not even most of it: half of any secret is too much.
		if strings.Contains(string(b), s[:len(s)/2]) {
			t.Errorf("report JSON holds %q:\n%s", s[:len(s)/2], b)
		}
	}

	tests := []struct {
		in, want string
	}{
		{fakeAKIA, "AKIA…(20 bytes)"},
		{"12345678", "12…(8 bytes)"},
		{"abc", "…(3 bytes)"},
		{"", "…(0 bytes)"},
		{"ééééééééé", "éé…(18 bytes)"},
		{"aéééééééé", "aé…(17 bytes)"}, // whole characters only
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := Redact([]byte(tt.in)); got != tt.want {
				t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestTruncated(t *testing.T) {
	lines := make([]string, MaxFindings+5)
	for i := range lines {
		lines[i] = fakeAKIA
	}
	r := Check(nil, []byte(newFile("many.txt", lines...)), Options{})
	if len(r.Secrets) != MaxFindings || !r.Truncated || r.OK {
		t.Errorf("%d findings, truncated %v, OK %v; want %d, true, false", len(r.Secrets), r.Truncated, r.OK, MaxFindings)
	}
	if r.Secrets[MaxFindings-1].Line != MaxFindings {
		t.Errorf("last kept finding on line %d, want the first %d lines kept", r.Secrets[MaxFindings-1].Line, MaxFindings)
	}
}

func TestEmpty(t *testing.T) {
	r := Check(nil, nil, Options{Writable: func(string) bool { return false }, KnownSecrets: []string{"whatever-secret"}})
	want := Report{OK: true, OutsideWritable: []PathFinding{}, Secrets: []SecretFinding{}}
	if diff := cmp.Diff(want, r); diff != "" {
		t.Errorf("Check of nothing (-want +got):\n%s", diff)
	}
	// The ID is the API's to fill in; the lists are never null.
	if b, _ := json.Marshal(r); string(b) != `{"id":"","ok":true,"outside_writable":[],"secrets":[]}` {
		t.Errorf("JSON = %s", b)
	}
}

func FuzzCheck(f *testing.F) {
	const known = "fuzz-known-secret"
	f.Add([]byte(sampleDiff))
	f.Add([]byte(newFile("a b/\"q\".txt", fakeAKIA, known, fakeJWT)))
	f.Add([]byte("diff --git \"a/\\303\" b/x\n@@ -1,99999999999999999999 +1 @@\n+" + known + "\n"))
	f.Add([]byte("diff --git a/x b/x\n@@ -0,0 +0,0 @@\n+\n\\\n@@ -5 +5,2 @@\n-\n+\n+\n"))
	f.Fuzz(func(t *testing.T, diff []byte) {
		r := Check([]Change{{Status: "M", Path: "x"}}, diff, Options{
			Writable:     func(rel string) bool { return strings.HasPrefix(rel, "s") },
			KnownSecrets: []string{known},
		})
		for _, s := range r.Secrets {
			if strings.Contains(s.Excerpt, known) {
				t.Fatalf("excerpt %q holds the known secret", s.Excerpt)
			}
			if s.Line < 0 {
				t.Fatalf("line %d", s.Line)
			}
		}
		if r.OK != (len(r.Secrets) == 0 && len(r.OutsideWritable) == 0) {
			t.Fatalf("OK = %v with %d and %d findings", r.OK, len(r.Secrets), len(r.OutsideWritable))
		}
	})
}
