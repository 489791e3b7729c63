__version__ = "0.2.0"

#: The botocore versions Kale's direct SQS requests (kale.transport.direct)
#: are tested with, from the first up to, not including, the second: setup.py
#: requires them (and boto3 from the first), and on a botocore outside them
#: every SQS request goes through botocore's own pipeline.
BOTOCORE_TESTED = ('1.35', '1.45')
