"""Who is calling the gateway: access tokens (JWTs) bound by DPoP or an mTLS certificate,
signed webhook deliveries, and the replay protection both share.

Below the API and the handlers' context, which use it; it imports neither."""
