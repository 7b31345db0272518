"""Chinese catalogues of the knowledge base (data only: rules.yaml, codes.yaml, faultcodes.yaml)."""
