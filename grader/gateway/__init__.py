"""The model gateway (DESIGN §4a) and the course model server it forwards to by default."""
