package health

// Provider is a service registration provider, whose checks are read from different places.
type Provider string

const (
	// ProviderNomad checks are read from Nomad's allocation checks endpoint.
	ProviderNomad Provider = "nomad"
	// ProviderConsul checks are read from Consul's health API.
	ProviderConsul Provider = "consul"
)
