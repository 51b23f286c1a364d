// Package fspb holds the messages and the Connect service of E2B's envd
// filesystem API, generated from filesystem.proto.
//
// Regenerate with `go generate ./internal/e2b/envdfs/fspb` after installing
// the two plugins at the versions go.mod pins:
//
//	go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//	go install connectrpc.com/connect/cmd/protoc-gen-connect-go@v1.21.1
//
// and Debian's protobuf-compiler (protoc 3.21).
package fspb

//go:generate protoc -I . -I /usr/include --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative filesystem.proto
