package guest

// The opening of a connection on the egress socket, between the guest's
// proxy relay and the daemon's egress proxy. The relay's first byte says
// how the client's connection reaches the proxy:
//
//   - EgressHandoff, with the client's TCP socket attached (SCM_RIGHTS):
//     the proxy serves the client's socket itself, and no byte goes through
//     the relay. The proxy closes the egress connection once it has the
//     socket; if none arrived (a runtime that cannot pass descriptors over
//     the socket), it answers EgressRelayAck instead, and the relay carries
//     the bytes as with EgressRelay.
//   - EgressRelay: the relay carries the client's bytes over this
//     connection, both ways.
//
// Any other first byte is the first byte of a proxy request: a client that
// dials the socket itself speaks HTTP on it directly. Whichever way the
// bytes come, the proxy makes the same checks.
const (
	EgressHandoff  byte = 0x00
	EgressRelay    byte = 0x01
	EgressRelayAck byte = 'R'
)
