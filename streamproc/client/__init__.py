"""The client side of the API's authentication, shared by every command of ours that calls
the gateway: a DPoP key in the data directory (:mod:`.dpop`), tokens from a static token or
the issuer's token endpoint (:mod:`.tokens`), and DPoP-signed requests that answer the nonce
challenge (:mod:`.http`); :mod:`.settings` puts them together from the configuration."""
