"""Small pieces shared by `tasks` and `models`: name registries and parameter checks."""
