"""Model files: the portable container, the encryption envelope, the Rockchip reader, the graph IR."""
