"""PhysAssistBench (issue 15, in progress): four-turn physician sessions over FHIR-shaped tools."""
