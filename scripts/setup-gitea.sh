#!/usr/bin/env bash
# setup-gitea.sh prepares the real Gitea that the pull request tests run against
# (testutil.StartGitea): it builds Gitea from the Go module proxy once, caches the binary
# with the templates and options it reads at run time, and makes the unprivileged system
# user it runs as (Gitea refuses to run as root). scripts/setup.sh calls it; it can also be
# run alone. Idempotent: a second run finds the binary and the user, and takes a moment.
#
# Why a wrapper module: code.gitea.io/gitea's go.mod has replace directives, which `go
# install pkg@version` refuses. A throwaway module that requires Gitea and repeats its
# replaces builds the same program. Its go.sum is Gitea's own (same dependency graph), so
# the versions are exactly the release's and nothing is resolved anew.
#
# Build tags as Gitea's release for SQLite: `sqlite sqlite_unlock_notify` (mattn/go-sqlite3,
# so CGO and gcc). No `bindata`: the frontend is not in the module, and the API needs only
# templates/ and options/, which are copied next to the binary (STATIC_ROOT_PATH).
#
# The first build takes minutes: 10.5 min measured on a 2-core build machine shared with
# other builds (6.7 min CPU), 100 s when Go's build cache already holds the packages. It
# holds a lock so that two runs never build at once, and installs with a marker file
# (.complete) that tests look for; tests never build it themselves.
#
# Environment:
#   AGENTBOX_CACHE   builds kept between runs, outside any clone (default /var/cache/agentbox)
#   GO               the go command (default: go on PATH or /usr/local/go/bin)
set -euo pipefail

# Keep in step with internal/testutil/gitea.go.
readonly GITEA_VERSION=v1.26.0
readonly GITEA_USER=agentbox-gitea
readonly CACHE=${AGENTBOX_CACHE:-/var/cache/agentbox}/gitea
readonly DEST=${CACHE}/${GITEA_VERSION}
readonly LOG=${AGENTBOX_GITEA_BUILD_LOG:-/var/log/agentbox-setup-gitea.log}
# Gitea's replace directives at v1.26.0 (its go.mod, end of file).
readonly REPLACES='
replace github.com/jaytaylor/html2text => github.com/Necoro/html2text v0.0.0-20250804200300-7bf1ce1c7347
replace github.com/nektos/act => gitea.com/gitea/act v0.261.10
replace github.com/urfave/cli/v3 => github.com/urfave/cli/v3 v3.4.1
replace go.yaml.in/yaml/v4 => go.yaml.in/yaml/v4 v4.0.0-rc.3
replace github.com/Azure/azure-sdk-for-go/sdk/azcore => github.com/Azure/azure-sdk-for-go/sdk/azcore v1.19.0
replace github.com/Azure/azure-sdk-for-go/sdk/storage/azblob => github.com/Azure/azure-sdk-for-go/sdk/storage/azblob v1.6.2
replace github.com/microsoft/go-mssqldb => github.com/microsoft/go-mssqldb v1.9.7
'

log() { printf 'setup-gitea: %s\n' "$*"; }
die() {
	printf 'setup-gitea: error: %s\n' "$*" >&2
	exit 1
}

# 1. The user Gitea runs as: a system user without a home, a shell or a password.
if [[ $(id -u) -eq 0 ]]; then
	if ! id -u "$GITEA_USER" >/dev/null 2>&1; then
		useradd --system --user-group --no-create-home --home-dir /nonexistent \
			--shell /usr/sbin/nologin "$GITEA_USER" || die "useradd ${GITEA_USER} failed"
		log "created system user ${GITEA_USER}"
	fi
fi

# 2. The binary.
if [[ -x ${DEST}/gitea && -f ${DEST}/.complete ]]; then
	log "gitea ${GITEA_VERSION}: cached at ${DEST}/gitea"
	exit 0
fi
go=${GO:-}
[[ -n $go ]] || go=$(PATH="$PATH:/usr/local/go/bin" command -v go) || die "no go toolchain to build gitea"
command -v gcc >/dev/null || die "gcc is needed (Gitea's SQLite driver is cgo): apt-get install gcc"
command -v flock >/dev/null || die "flock (util-linux) is needed"

mkdir -p "$CACHE"
chmod 0755 "$CACHE" "$(dirname "$CACHE")"
exec 9>"${CACHE}/.lock"
flock 9
# Another run may have built it while this one waited.
if [[ -x ${DEST}/gitea && -f ${DEST}/.complete ]]; then
	log "gitea ${GITEA_VERSION}: cached at ${DEST}/gitea"
	exit 0
fi

log "gitea ${GITEA_VERSION}: building (minutes the first time; log ${LOG})"
start=$SECONDS
work=$(mktemp -d "${CACHE}/.build.XXXXXX")
trap 'rm -rf "$work"' EXIT
# Each step ends the build on failure by hand: set -e does not act inside
# a subshell whose failure is tested.
(
	cd "$work" || exit 1
	export GOTOOLCHAIN=local GOFLAGS=-mod=mod CGO_ENABLED=1
	"$go" mod download -json "code.gitea.io/gitea@${GITEA_VERSION}" >download.json || exit 1
	# A string field of the one object go printed; the last has no comma.
	field() { sed -n "s/^\t\"$1\": \"\(.*\)\",\{0,1\}\$/\1/p" download.json; }
	src=$(field Dir)
	sum=$(field Sum)
	gomodsum=$(field GoModSum)
	[[ -d $src && -n $sum && -n $gomodsum ]] || {
		echo "go mod download gave no source directory or sums for gitea ${GITEA_VERSION}:"
		cat download.json
		exit 1
	}
	goversion=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$src/go.mod")
	printf 'module agentbox.invalid/gitea-build\n\ngo %s\n\nrequire code.gitea.io/gitea %s\n%s' \
		"$goversion" "$GITEA_VERSION" "$REPLACES" >go.mod
	# Gitea's own go.sum covers its whole graph; add the lines for Gitea itself.
	cp "$src/go.sum" go.sum || exit 1
	printf 'code.gitea.io/gitea %s %s\ncode.gitea.io/gitea %s/go.mod %s\n' \
		"$GITEA_VERSION" "$sum" "$GITEA_VERSION" "$gomodsum" >>go.sum
	tags="sqlite sqlite_unlock_notify"
	# As Gitea's Makefile: allow SQLite's larger variable count.
	CGO_CFLAGS="$("$go" env CGO_CFLAGS) -DSQLITE_MAX_VARIABLE_NUMBER=32766" \
		"$go" build -trimpath -tags "$tags" \
		-ldflags "-s -w -X main.Version=${GITEA_VERSION#v} -X 'main.Tags=${tags}'" \
		-o "$work/out/gitea" code.gitea.io/gitea || exit 1
	mkdir -p "$work/out/static/public" &&
		cp -r "$src/templates" "$src/options" "$work/out/static/" &&
		chmod -R a+rX,u+w "$work/out"
) >>"$LOG" 2>&1 || die "building gitea ${GITEA_VERSION} failed: see ${LOG}"
"$work/out/gitea" --version >>"$LOG" 2>&1 || die "the gitea built does not run: see ${LOG}"
rm -rf "$DEST"
mv "$work/out" "$DEST"
touch "${DEST}/.complete"
log "gitea ${GITEA_VERSION}: built in $((SECONDS - start))s, cached at ${DEST}/gitea"
