"""The pipeline's Lambda code: one package, imported as `lambdas.<module>` everywhere it runs (in
Lambda, whose handlers are `lambdas.<function>.handler`, in the constructs, in `ops`, in the local
runtime and in the tests). Standard library and the Lambda runtime's boto3 only."""
