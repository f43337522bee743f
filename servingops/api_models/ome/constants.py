"""Identity of the ome.io API group every OME kind is served under."""

GROUP = "ome.io"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"
