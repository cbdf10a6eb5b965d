"""Prompt templates, one folder per version; a changed wording is a new version folder."""
