// Package processpb holds the messages and the Connect handler interface
// of E2B's envd process service (process.Process), generated from
// process.proto by protoc with protoc-gen-go and protoc-gen-connect-go.
package processpb

//go:generate protoc -I . --go_out=. --go_opt=paths=source_relative --connect-go_out=. --connect-go_opt=paths=source_relative process.proto
