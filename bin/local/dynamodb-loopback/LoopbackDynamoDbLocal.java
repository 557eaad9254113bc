import java.lang.reflect.Field;
import org.eclipse.jetty.server.Connector;
import org.eclipse.jetty.server.Server;
import org.eclipse.jetty.server.ServerConnector;
import software.amazon.dynamodb.services.local.main.ServerRunner;
import software.amazon.dynamodb.services.local.server.DynamoDBProxyServer;

/**
 * DynamoDB Local as its own main class starts it, but listening on loopback only. It has no option for the address:
 * its Jetty server is made with a port alone, which listens on every interface, so anyone who can reach the machine
 * could read and write the local host's accounts, keys, wallets and registry (any credentials pass with -sharedDb).
 * Before the server starts, its one connector is told the host. The command line is DynamoDB Local's own. Telemetry
 * is never set up here (its main class would, unless -disableTelemetry), so none is sent.
 */
public final class LoopbackDynamoDbLocal {
  public static void main(String[] args) throws Exception {
    DynamoDBProxyServer proxy = ServerRunner.createServerFromCommandLineArgs(args);
    Field field = DynamoDBProxyServer.class.getDeclaredField("server");
    field.setAccessible(true);
    Server server = (Server) field.get(proxy);
    Connector[] connectors = server.getConnectors();
    if (connectors.length == 0) throw new IllegalStateException("DynamoDB Local's server has no connector to bind");
    for (Connector connector : connectors) ((ServerConnector) connector).setHost("127.0.0.1");
    proxy.start();
  }
}
