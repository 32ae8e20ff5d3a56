"""The local cloud: moto in server mode on loopback, plus a runtime that plays the AWS parts moto does not."""
