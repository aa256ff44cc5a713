"""The AWS wing: clients and credentials, the SSM transport, the SageMaker backend, and enable()."""
