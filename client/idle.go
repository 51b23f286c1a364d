package client

// CloseIdleConnections closes the client's kept-alive connections to the
// daemon that carry no request now. A program that is done with a client
// calls it so that the daemon does not hold those connections open.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }
