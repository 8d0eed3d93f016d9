package sim

// ConsulKVPut sets a key of the simulated Consul's KV store, as PUT /v1/kv/<key> on
// ConsulAddr does (flags 0): a test's way to give a key a value without an HTTP client.
func (c *Cluster) ConsulKVPut(key, value string) {
	c.Ext.catalog.KVPut(key, []byte(value))
}

// ConsulKVGet returns a key's value in the simulated Consul's KV store and whether it exists.
func (c *Cluster) ConsulKVGet(key string) (string, bool) {
	v, ok := c.Ext.catalog.KVGet(key)
	return string(v), ok
}
