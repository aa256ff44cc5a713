"""SageMaker in a box: ``remote-debug emulator``.

AWS's endpoints, emulated on one local URL, so that an unchanged SageMaker launcher (SDK v2, SDK v3,
a raw boto3 request) and the product's own SageMaker backend run offline with AWS's real code in
the loop: botocore, the SDKs, the Session Manager plugin and the training toolkit.

* :mod:`.server` - the HTTP front: moto's server for the generic services (S3, CloudWatch Logs, STS,
  IAM, the rest of SSM), with the training-job API and SSM sessions served here instead;
* :mod:`.training` - a CreateTrainingJob run the way SageMaker runs it (statuses, channels, logs);
* :mod:`.nodes` - a node per instance: network, mount and UTS namespaces, ``/opt/ml`` per node;
* :mod:`.ssm_channel` - the agent's side of the Session Manager data channel (a WebSocket).

Product code never imports this package (``tests/test_layering.py``): the emulator is reached
only through ``AWS_ENDPOINT_URL``, like AWS itself.
"""
